"""vllm_stress.master.rows: a requests.csv row while it is still a list on the master — the positions of the columns
the live code reads, and which rows are measured or aborted (the rule of Exchange.measured, read back)."""

import pytest

from vllm_stress.client.exchange import Exchange
from vllm_stress.core import schema
from vllm_stress.master import rows

POSITIONS = {
    "COMPLETION": "completion_tokens",
    "END": "end_time",
    "OK": "ok",
    "MISMATCH": "count_mismatch",
    "USERS": "users",
    "TTFT": "ttft_s",
    "TPOT": "tpot_s",
    "E2E": "e2e_s",
    "START": "start_time",
    "CHUNKS": "chunks",
    "ERROR": "error",
    "FINISH": "finish_reason",
    "SCHEDULE_LAG": "schedule_lag_s",
}


@pytest.mark.product_free
def test_each_position_holds_its_column():
    assert {name: schema.REQUEST_COLUMNS[getattr(rows, name)] for name in POSITIONS} == POSITIONS


def ended(prompt_tokens: int = 100, finish_reason: str = "length", error: str = "") -> list:
    """The row of a two-chunk chat request (100 prompt tokens asked, 2 output tokens) that ended so."""
    exchange = Exchange("chat", 4, 100, 2, check_output=True)
    exchange.output(exchange.start + 0.1)
    exchange.output(exchange.start + 0.2)
    exchange.usage({"prompt_tokens": prompt_tokens, "completion_tokens": 2})
    exchange.finish_reason = finish_reason
    if error:
        exchange.fail(error)
    else:
        exchange.finish()
    return exchange.row("w1")


@pytest.mark.parametrize(
    ("row", "measured", "aborted"),
    [
        (ended(), True, False),
        (ended(prompt_tokens=101), False, False),  # off its token target: a success, not measured
        (ended(finish_reason="abort"), False, False),  # the server aborted it
        (ended(error="Timeout"), False, False),  # a failure
        (ended(error=schema.ABORTED), False, True),  # the run stopped it: neither success nor failure
    ],
    ids=["success", "count-mismatch", "server-abort", "failure", "run-stopped"],
)
def test_measured_and_aborted(row, measured, aborted):
    assert rows.measured(row) is measured and rows.aborted(row) is aborted
    assert row[rows.USERS] == 4 and row[rows.CHUNKS] == 2 and row[rows.COMPLETION] == 2
