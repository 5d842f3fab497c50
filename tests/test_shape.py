"""vllm_stress.scenarios.shapes.shape: the step ramp, ticked by the test on a clock of its own — each level ramps, warms up
for at least --warmup and one request lifetime, holds, and says so through the suite's events (a ramp through
Locust: test_ramp.py, test_steady.py, test_webui.py)."""

import argparse
import time
from types import SimpleNamespace

import pytest

from vllm_stress.core import schema
from vllm_stress.master import hooks
from vllm_stress.scenarios.shapes import shape
from vllm_stress.scenarios.shapes.shape import StepRampShape, level_bound_s


def options(**ramp) -> argparse.Namespace:
    defaults = {"levels": "2,4", "step_time": "10", "max_step_time": 60.0, "warmup": 1.0, "cooldown": 0.0}
    defaults |= {"max_minutes": 0.0}
    return argparse.Namespace(**(defaults | {"ramp_time": 1.0, "run_label": ""} | ramp))


def ended(users: int, end: float) -> list:
    """A measured request of the level ``users`` that ended at ``end`` (1 s long, 10 tokens)."""
    values = dict.fromkeys(schema.REQUEST_COLUMNS, "")
    values |= {"start_time": end - 1, "end_time": end, "ttft_s": 0.1, "e2e_s": 1.0, "chunks": 10}
    values |= {"completion_tokens": 10, "count_mismatch": 0, "ok": 1, "finish_reason": "length", "users": users}
    return [values[column] for column in schema.REQUEST_COLUMNS]


class Ramp:
    """A shape on a master of the test's: ``tick()`` at the clock's time, what the shape said through the events."""

    def __init__(self, monkeypatch, **ramp) -> None:
        self.now = 1000.0
        monkeypatch.setattr(time, "time", lambda: self.now)
        monkeypatch.setattr(time, "monotonic", lambda: self.now)
        self.environment = SimpleNamespace(parsed_options=options(**ramp), process_exit_code=None)
        self.runner = SimpleNamespace(environment=self.environment, clients={}, user_count=0)
        self.phases: list[str] = []
        self.ended: list[tuple] = []
        self.stopped: list[tuple[int, str]] = []  # what --stop-on said (hooks.ramp_stopped)
        hooks.phase_changed.add_listener(self._on_phase)
        hooks.level_ended.add_listener(self._on_ended)
        hooks.ramp_stopped.add_listener(self._on_stopped)
        self.shape = StepRampShape()
        self.shape.runner = self.runner

    def _on_phase(self, environment, text, **_kw) -> None:
        if environment is self.environment:
            self.phases.append(text.split("; ")[0])  # the ETA aside

    def _on_ended(self, environment, users, verdict, output_tokens_per_s, **_kw) -> None:
        if environment is self.environment:
            self.ended.append((users, verdict.steady, verdict.reason, output_tokens_per_s))

    def _on_stopped(self, environment, users, reason, **_kw) -> None:
        if environment is self.environment:
            self.stopped.append((users, reason))

    def tick(self, at: float):
        self.now = at
        return self.shape.tick()

    def rows(self, *rows: list) -> None:
        hooks.rows_received.fire(environment=self.environment, rows=list(rows))

    def close(self) -> None:
        hooks.phase_changed.remove_listener(self._on_phase)
        hooks.level_ended.remove_listener(self._on_ended)
        hooks.ramp_stopped.remove_listener(self._on_stopped)


@pytest.fixture
def ramp(monkeypatch):
    ramps = []

    def make(**ramp_options) -> Ramp:
        ramps.append(Ramp(monkeypatch, **ramp_options))
        return ramps[-1]

    yield make
    for made in ramps:
        made.close()


def test_two_levels_ramp_warm_up_hold_and_end(ramp):
    r = ramp()
    assert r.tick(1000.0) == (2, 2.0)  # 2 users at 2/s: over --ramp-time 1 s
    assert r.tick(1000.5) == (2, 2.0)  # not all running yet
    r.runner.user_count = 2
    r.tick(1001.0)  # all running: warming up
    r.rows(ended(2, 1001.5))
    r.tick(1003.0)  # past --warmup, but one request lifetime (2 completions) not yet
    assert r.phases[-1].endswith("warming up: at least 1 s and 2 completed requests (one request lifetime)")
    r.rows(ended(2, 1003.2))
    r.tick(1003.5)  # held from here, 10 s
    assert r.phases[-1] == "Level 1/2 (2 users): holding 10 s"
    r.rows(*(ended(2, 1004.0 + i) for i in range(10)))
    assert r.tick(1013.0) == (2, 2.0) and r.ended == []
    r.tick(1013.5)
    (users, steady, reason, tokens_per_s) = r.ended[0]
    assert (users, steady, reason) == (2, True, "the window's halves agree over 10.0 request lifetimes")
    # the hold [1003.5, 1013.5): nine requests' 10 tokens, and the part of the one ending at 1004 streamed in it
    assert tokens_per_s == pytest.approx((9 * 10 + 10 * 0.5 / 0.9) / 10)
    assert r.tick(1014.0) == (4, 2.0)  # the next level: 2 more users over 1 s
    assert r.phases == [
        "Level 1/2 (2 users): ramping up over 1 s",
        "Level 1/2 (2 users): warming up: at least 1 s and 2 completed requests (one request lifetime)",
        "Level 1/2 (2 users): holding 10 s",
        f"Level 1/2 (2 users): held 10 s: steady ({reason})",
        "Level 2/2 (4 users): ramping up over 1 s",
    ]
    r.runner.user_count = 4
    r.tick(1015.0)
    r.rows(*(ended(4, 1016.0 + i / 4) for i in range(4)))
    r.tick(1016.5)
    r.tick(1027.0)
    assert [users for users, *_ in r.ended] == [2, 4]
    assert r.tick(1027.5) is None  # the ramp is over


def test_a_cooldown_stops_every_user_between_levels(ramp):
    r = ramp(levels="1,3", cooldown=5.0, warmup=0.0, step_time="2")
    r.tick(1000.0)
    r.runner.user_count = 1
    r.tick(1000.1)
    r.rows(ended(1, 1000.2))
    r.tick(1000.3)
    r.tick(1002.5)  # the hold's end
    assert r.tick(1003.0) == (0, 1)  # cooling down: no users
    assert r.tick(1008.0) == (3, 3.0)  # from 0 to 3 users over 1 s


def test_a_level_never_reached_is_held_anyway(ramp, caplog):
    r = ramp(levels="8")
    r.tick(1000.0)
    r.runner.user_count = 5
    r.tick(1000.0 + shape.REACH_TIMEOUT_S + 1)
    assert r.phases[-1].startswith("Level 1/1 (8 users): warming up")
    assert "Level 8 users not reached in 120 s (5 running): holding anyway" in caplog.text


def run_first_level(r: "Ramp", users: int = 2) -> None:
    """The first level of ``r`` from 1000 s: running at 1001, one lifetime (1 s requests) by 1003.5, a 10 s hold."""
    r.tick(1000.0)
    r.runner.user_count = users
    r.tick(1001.0)
    r.rows(*(ended(users, 1002.0 + i) for i in range(2)))
    r.tick(1003.5)
    r.rows(*(ended(users, 1004.0 + i) for i in range(10)))
    r.tick(1013.5)


def test_a_budget_cuts_the_levels_that_no_longer_fit_with_the_reason(ramp, caplog):
    """The first level took 14 s; the next one (4 users, requests living longer) would take about as long: with 0.4 min
    (24 s) it would end after the budget, so it and those after it are cut and the ramp ends."""
    r = ramp(levels="2,4,8", max_minutes=0.4)
    run_first_level(r)
    assert [users for users, *_ in r.ended] == [2]
    assert r.tick(1014.0) is None and r.tick(1015.0) is None
    assert (
        r.phases[-1] == "Level 1/3 (2 users): held 10 s: steady (the window's halves agree over 10.0 request lifetimes)"
    )
    (cut,) = [record.message for record in caplog.records if " cut: " in record.message]
    assert cut.startswith("levels 4, 8 cut: 0.2 of 0.4 min used; level 4 would take about 0.")


def test_a_budget_that_fits_the_next_level_keeps_it(ramp, caplog):
    r = ramp(levels="2,4,8", max_minutes=0.6)  # 36 s: the second level (about 15 s) fits after 14 s
    run_first_level(r)
    assert r.tick(1014.0) == (4, 2.0)
    assert " cut: " not in caplog.text


def test_a_hold_ends_when_the_budget_is_used_up_and_is_judged(ramp):
    r = ramp(levels="2,4", step_time="auto", max_minutes=0.1)  # 6 s: the auto hold (at most 60 s) ends at 1006
    r.tick(1000.0)
    r.runner.user_count = 2
    r.tick(1001.0)
    r.rows(*(ended(2, 1001.5 + i) for i in range(2)))
    r.tick(1003.0)
    assert r.phases[-1].startswith("Level 1/2 (2 users): holding until steady")
    r.tick(1005.9)
    assert r.ended == []
    r.tick(1006.0)
    assert [users for users, *_ in r.ended] == [2]
    assert r.phases[-1].startswith("Level 1/2 (2 users): held 3 s, the end of --max-minutes: ")
    assert r.tick(1006.5) is None


def test_a_budget_used_up_before_a_levels_hold_cuts_it(ramp, caplog):
    r = ramp(levels="8,16", max_minutes=0.5)
    r.tick(1000.0)
    r.runner.user_count = 3  # never reaches 8 users
    assert r.tick(1029.0) == (8, 8.0)
    assert r.tick(1030.0) is None and r.ended == []
    assert "levels 8, 16 cut: 0.5 of 0.5 min used" in caplog.text


def test_the_eta_is_capped_by_the_budget(ramp):
    r = ramp(levels="2,4", max_minutes=0.5)
    r.tick(1000.0)
    assert r.shape.deadline(r.environment.parsed_options) == 1030.0
    assert r.shape.deadline(options()) is None


def test_a_bad_option_stops_the_run_with_exit_code_2(ramp, caplog):
    r = ramp(levels="2,x")
    assert r.tick(1000.0) is None and r.environment.process_exit_code == 2
    assert "--levels must be comma-separated whole numbers, got '2,x'" in caplog.text


def test_a_level_at_its_longest():
    fixed = options(step_time="10", max_step_time=60.0, warmup=1.0, ramp_time=1.0, cooldown=2.0)
    assert level_bound_s(fixed, 10.0) == 1 + 60 + 10 + 2  # the warm-up may wait up to max-step-time
    assert level_bound_s(fixed, None) == 1 + 60 + 60 + 2
    assert level_bound_s(options(ramp_time=500.0), 10.0) == shape.REACH_TIMEOUT_S + 60 + 10


def failed(users: int, end: float) -> list:
    """A request of the level ``users`` that failed at ``end`` (a timeout after 1 s)."""
    row = ended(users, end)
    row[schema.REQUEST_COLUMNS.index("ok")] = 0
    row[schema.REQUEST_COLUMNS.index("error")] = "Timeout"
    return row


def held_level(r: Ramp, users: int, start: float, rows: list) -> None:
    """Ramp, warm up and hold the level of ``users`` from ``start`` (its hold [start + 1.5, start + 11.5)), with
    ``rows``; the last tick at the hold's end."""
    r.tick(start)
    r.runner.user_count = users
    r.tick(start + 0.5)  # warming up
    r.rows(*(ended(users, start + 0.6) for _ in range(users)))
    r.tick(start + 1.5)  # held
    r.rows(*rows)
    r.tick(start + 11.5)  # the hold's end


def test_a_stop_on_rule_ends_the_ramp_after_the_level_that_trips_it(ramp, caplog):
    r = ramp(levels="2,4,8", stop_on="errors>20%")
    rows = [ended(2, 1002.0 + i) for i in range(7)] + [failed(2, 1009.5), failed(2, 1010.5), failed(2, 1011.6)]
    held_level(r, 2, 1000.0, rows)  # the hold [1001.5, 1011.5): 9 requests, 2 failed (the third ended after it)
    assert [users for users, *_ in r.ended] == [2]
    assert r.tick(1012.0) is None  # judged: no next level
    assert r.stopped == [(2, "errors 22.2 % > 20.0 %")]
    assert "Stopped early after 2 users: errors 22.2 % > 20.0 %" in caplog.text
    assert r.tick(1012.0) is None and r.environment.process_exit_code is None
    assert not any("4 users" in phase for phase in r.phases)


def test_a_level_within_the_rules_goes_on_and_the_last_level_is_not_judged(ramp):
    r = ramp(levels="2,4", stop_on="errors>20%,ttft>0.5s")
    held_level(r, 2, 1000.0, [ended(2, 1002.0 + i) for i in range(9)] + [failed(2, 1010.5)])  # 10 %
    assert r.tick(1012.0) == (4, 2.0)  # the next level
    held_level(r, 4, 1012.0, [failed(4, 1014.0 + i) for i in range(5)])
    assert r.tick(1024.0) is None and r.stopped == []  # the ramp's end: no level left to spare


def test_the_verdict_waits_for_the_holds_requests(ramp):
    """A worker that last reported before the hold's end: its rows may still come, so the level is judged once
    every process has reported past it (a cooldown of 0: the level's users go on meanwhile)."""
    r = ramp(levels="2,4", stop_on="errors>20%")
    held_level(r, 2, 1000.0, [ended(2, 1002.0 + i) for i in range(8)])
    hooks.in_flight_reported.fire(environment=r.environment, source="w1", report_time=1011.0, entries=[])
    assert r.tick(1012.0) == (2, 2.0) and r.stopped == []  # waiting: the level's users still run
    r.rows(failed(2, 1011.1), failed(2, 1011.2), failed(2, 1011.3))  # ended in the hold, told late
    hooks.in_flight_reported.fire(environment=r.environment, source="w1", report_time=1012.0, entries=[])
    assert r.tick(1012.5) is None and r.stopped == [(2, "errors 27.3 % > 20.0 %")]


def test_a_bad_stop_rule_stops_the_run_with_exit_code_2(ramp, caplog):
    r = ramp(stop_on="errors>lots")
    assert r.tick(1000.0) is None and r.environment.process_exit_code == 2
    assert "--stop-on: 'errors>lots' is not NAME>LIMIT" in caplog.text
    spike = ramp(stop_on="errors>5%", shape="spike:1,2,1,1,3")
    assert spike.tick(1000.0) is None and spike.environment.process_exit_code == 2
    assert "--stop-on: only the step ramp (--shape steps) stops early" in caplog.text


def test_a_queue_growing_through_the_hold_stops_the_ramp_as_saturated(ramp):
    """The server's scrapes (hooks.server_scraped, as ServerMetrics fires them): a full queue that has settled goes
    on, one that grows through the hold stops the ramp; scrapes before the level's ramp do not count."""
    r = ramp(levels="2,4,8", stop_on="saturated")

    def scraped(start: float, *waiting) -> None:
        for i, value in enumerate(waiting):
            hooks.server_scraped.fire(environment=r.environment, row={"time": start + i, "waiting": value})

    held_level(r, 2, 1000.0, [ended(2, 1002.0 + i) for i in range(9)])
    scraped(1001.6, 9, 8, 9, "", 8, 9, 8, 9, 8, 9)  # the hold [1001.5, 1011.5): full, settled ("": not exported)
    assert r.tick(1012.0) == (4, 2.0)
    held_level(r, 4, 1012.0, [ended(4, 1014.0 + i) for i in range(9)])
    scraped(1013.6, 1, 2, 2, 4, 5, 6, 8, 9, 11, 12)  # the hold [1013.5, 1023.5), by thirds: 1 to 4, 5 to 8, 9 to 12
    assert r.tick(1024.0) is None
    reason = "saturated: the server's queue grew through the hold (2.25 → 6.33 → 10.7 waiting, the means of its thirds)"
    assert r.stopped == [(4, reason)]


def test_a_process_that_never_reports_past_the_hold_delays_the_verdict_at_most_stop_wait_s(ramp):
    r = ramp(levels="2,4", stop_on="errors>20%")
    held_level(r, 2, 1000.0, [failed(2, 1002.0 + i) for i in range(8)])
    hooks.in_flight_reported.fire(environment=r.environment, source="w1", report_time=1011.0, entries=[])
    assert r.tick(1011.5 + shape.STOP_WAIT_S - 0.5) == (2, 2.0) and r.stopped == []
    assert r.tick(1011.5 + shape.STOP_WAIT_S) is None and r.stopped == [(2, "errors 100.0 % > 20.0 %")]
