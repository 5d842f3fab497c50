"""vllm_stress.master.levelwindow: the open level's requests as the master knows them live — the rows that arrived and
what the requests still in flight reported — and the figures the load shape judges a hold by."""

import math
import time
from types import SimpleNamespace

import pytest
from locust.runners import STATE_MISSING, STATE_RUNNING

from vllm_stress.core import schema
from vllm_stress.master import hooks
from vllm_stress.master.levelwindow import LevelWindow


def row(start, ttft, end, tokens, users=4, lag="", error=""):
    """A requests.csv row as the master receives it (a list)."""
    values = dict.fromkeys(schema.REQUEST_COLUMNS, "")
    values |= {
        "start_time": start,
        "end_time": end,
        "ttft_s": ttft,
        "e2e_s": end - start,
        "chunks": tokens,
        "completion_tokens": tokens,
        "count_mismatch": 0,
        "ok": int(not error),
        "error": error,
        "finish_reason": "length",
        "users": users,
        "schedule_lag_s": lag,
    }
    return [values[column] for column in schema.REQUEST_COLUMNS]


@pytest.fixture
def clock(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


@pytest.fixture
def master():
    """A master's runner with two workers, w2 missing (Locust's heartbeat says so)."""
    clients = {
        name: SimpleNamespace(id=name, state=state) for name, state in (("w1", STATE_RUNNING), ("w2", STATE_MISSING))
    }
    return SimpleNamespace(environment=SimpleNamespace(), clients=clients)


@pytest.mark.parametrize("counted", [False, True])
def test_canaries_are_left_out_of_the_hold_unless_counted_in(clock, master, counted):
    master.environment.parsed_options = SimpleNamespace(canaries_in_figures=counted)
    window = LevelWindow(master)
    canary = row(96, 1, 99, 2)
    canary[schema.REQUEST_COLUMNS.index("canary")] = "syn-mc-001"
    hooks.rows_received.fire(environment=master.environment, rows=[row(96, 1, 100, 10), canary])
    assert len(window.rows) == 1 + counted


def test_a_level_keeps_only_the_rows_that_ended_since_its_ramp_began(clock, master):
    window = LevelWindow(master)
    early = row(90, 1, 95, 10)
    hooks.rows_received.fire(environment=master.environment, rows=[early, row(96, 1, 100, 10, users=2)])
    hooks.rows_received.fire(environment=SimpleNamespace(), rows=[row(98, 1, 101, 10)])  # another run's
    window.start(4)
    assert window.rows == [row(96, 1, 100, 10, users=2)]
    hooks.rows_received.fire(
        environment=master.environment,
        rows=[row(98, 1, 104, 50), row(99, 1, 103, 20, error=schema.ABORTED), row(99, 1, 105, 20, error="Timeout")],
    )
    assert window.completions() == 2  # this level's rows, the aborted one apart (a failure is a completion)


def test_figures_of_the_hold_count_the_requests_in_flight(clock, master):
    window = LevelWindow(master)
    window.start(4)
    assert window.verdict().reason == "the level is not held" and math.isnan(window.output_tokens_per_s())
    window.hold()  # at 100
    rows = [
        row(98, 1, 104, 50, lag=0.1),  # 10 tok/s from 99 to 104: 40 tokens in the hold
        row(101, 1, 106, 40, lag=0.3),  # 10 tok/s from 102 to 106: 40 tokens
        row(90, 1, 101, 100, users=2, lag=5.0),  # the previous level's: 10 tokens in the hold, no lag of this level
        row(102, 1, 103, 10, lag=9.0, error="HTTP 500"),  # not measured
    ]
    hooks.rows_received.fire(environment=master.environment, rows=rows)
    clock[0] = 110.0
    assert window.output_tokens_per_s() == pytest.approx((40 + 40 + 10 + 10) / 10)  # the failure streamed 10 too
    # w1 reports one request in flight (started 105, first token 106, 8 chunks); w2 is missing: its report is not
    # waited for
    hooks.in_flight_reported.fire(
        environment=master.environment, source="w1", report_time=110.0, entries=[[105, 106, 8]]
    )
    hooks.in_flight_reported.fire(
        environment=master.environment, source="w2", report_time=104.0, entries=[[103, 103, 0]]
    )
    assert window.in_flight() == (110.0, [[105, 106, 8, 110.0]])
    assert window.output_tokens_per_s() == pytest.approx((40 + 40 + 10 + 10 + 8) / 10)
    assert window.schedule_lag_p99_s() == pytest.approx(0.1 + 0.99 * 0.2)
    verdict = window.verdict()  # the measured ones: e2e 6 and 5 s, p50 5.5 s
    assert not verdict.steady and verdict.e2e_p50_s == 5.5 and verdict.lifetimes == pytest.approx(10 / 5.5)
    assert verdict.reason == "the 10 s window holds 1.8 request lifetimes (e2e p50 5.5 s); steady needs 3"


def test_the_window_ends_at_the_oldest_newest_report(clock, master):
    master.clients["w2"].state = STATE_RUNNING
    window = LevelWindow(master)
    window.start(4)
    window.hold()
    hooks.in_flight_reported.fire(environment=master.environment, source="w1", report_time=109.0, entries=[])
    hooks.in_flight_reported.fire(
        environment=master.environment, source="w2", report_time=107.5, entries=[[101, 102, 3]]
    )
    clock[0] = 110.0
    start, end, requests = window.sample()
    assert (start, end) == (100.0, 107.5)  # up to 107.5 every process's requests are known
    assert list(requests.tokens) == [3] and not requests.measured.any() and list(requests.e2e) == [6.5]
