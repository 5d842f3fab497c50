"""How every request started is counted: outcomes, rows per worker, lost workers, requests without a row."""

from __future__ import annotations

from vllm_stress.core import schema
from vllm_stress.master.accounting import RequestAccounting


def request_row(**fields) -> list:
    values = dict.fromkeys(schema.REQUEST_COLUMNS, "") | {"ok": 1, "count_mismatch": 0, "users": 4} | fields
    return [values[column] for column in schema.REQUEST_COLUMNS]


SUCCESS = request_row()
FAILURE = request_row(ok=0, error="HTTP 503")
ABORTED = request_row(ok=0, error=schema.ABORTED)
CANCELLED = request_row(ok=0, error=schema.CANCELLED)
MISMATCH = request_row(count_mismatch=1)
CANARY = request_row(canary="syn-mc-001")


def test_rows_are_counted_by_outcome_and_by_worker():
    accounting = RequestAccounting()
    accounting.count([SUCCESS, FAILURE, ABORTED, CANCELLED, MISMATCH], worker="w1")
    accounting.count([SUCCESS], worker="w2")
    accounting.count([], worker="w3")  # a report without rows: the worker is seen
    accounting.count([SUCCESS, CANARY])  # the local runner's own rows; a canary is a request like any other
    assert dict(accounting.totals) == {
        "requests": 6, "failures": 1, "aborted": 1, "cancelled": 1, "mismatches": 1, "canaries": 1, "primers": 0,
        "engine_requests": 8,
    }  # fmt: skip
    assert accounting.run_keys()["workers"] == ["w1", "w2", "w3"]
    assert dict(accounting.rows_by_worker) == {"w1": 5, "w2": 1, "w3": 0}


def test_requests_the_server_finished_without_a_row_are_unaccounted():
    accounting = RequestAccounting()
    accounting.count([SUCCESS, SUCCESS, FAILURE, ABORTED], worker="w1")
    assert accounting.unaccounted() is None  # the server's count is not known
    accounting.lose_worker("w1", last_seen=123.0)
    accounting.server_requests = 10  # a stream cut as its last chunk came may be one the server finished: a floor
    keys = accounting.run_keys()
    assert keys["unaccounted_requests"] == 6 and keys["server_requests"] == 10
    assert keys["lost_workers"] == [{"worker": "w1", "last_seen": 123.0, "rows": 4}]
    accounting.count([SUCCESS], worker="w1")  # its link came back: a report sent before the loss still arrived
    assert accounting.run_keys()["lost_workers"] == [{"worker": "w1", "last_seen": 123.0, "rows": 5}]
    accounting.server_requests = 2  # another client's requests cannot make it negative
    assert accounting.unaccounted() == 0


def test_a_pooling_row_counts_as_its_inputs_on_the_server():
    """vLLM runs each input of an embeddings request as an engine request, and a rerank or score request's documents
    (on an embedding model its query too): the rows account for that many finished requests, at most."""
    accounting = RequestAccounting()
    embeddings = request_row(endpoint="/v1/embeddings", inputs=4)
    rerank, score = request_row(endpoint="/rerank", inputs=5), request_row(endpoint="/v1/score", inputs=5)
    accounting.count([embeddings, rerank, score, SUCCESS])
    accounting.server_requests = 4 + 6 + 6 + 1
    assert accounting.unaccounted() == 0 and accounting.totals["requests"] == 4
    accounting.server_requests += 1  # one request more than the rows can account for
    assert accounting.unaccounted() == 1


def test_reset_starts_a_new_run():
    accounting = RequestAccounting()
    accounting.count([SUCCESS], worker="w1")
    accounting.lose_worker("w1", None)
    accounting.server_requests = 3
    accounting.reset()
    assert accounting.run_keys() == {
        "workers": [],
        "lost_workers": [],
        "server_requests": None,
        "unaccounted_requests": None,
    }
    assert not accounting.totals
