"""vllm_stress.scenarios.shape: the step ramp, ticked by the test on a clock of its own — each level ramps, warms up
for at least --warmup and one request lifetime, holds, and says so through the suite's events (a ramp through
Locust: test_ramp.py, test_steady.py, test_webui.py)."""

import argparse
import time
from types import SimpleNamespace

import pytest

from vllm_stress.core import schema
from vllm_stress.master import hooks
from vllm_stress.scenarios import shape
from vllm_stress.scenarios.shape import StepRampShape, level_bound_s


def options(**ramp) -> argparse.Namespace:
    defaults = {"levels": "2,4", "step_time": "10", "max_step_time": 60.0, "warmup": 1.0, "cooldown": 0.0}
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
        hooks.phase_changed.add_listener(self._on_phase)
        hooks.level_ended.add_listener(self._on_ended)
        self.shape = StepRampShape()
        self.shape.runner = self.runner

    def _on_phase(self, environment, text, **_kw) -> None:
        if environment is self.environment:
            self.phases.append(text.split("; ")[0])  # the ETA aside

    def _on_ended(self, environment, users, verdict, output_tokens_per_s, **_kw) -> None:
        if environment is self.environment:
            self.ended.append((users, verdict.steady, verdict.reason, output_tokens_per_s))

    def tick(self, at: float):
        self.now = at
        return self.shape.tick()

    def rows(self, *rows: list) -> None:
        hooks.rows_received.fire(environment=self.environment, rows=list(rows))

    def close(self) -> None:
        hooks.phase_changed.remove_listener(self._on_phase)
        hooks.level_ended.remove_listener(self._on_ended)


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


def test_a_bad_option_stops_the_run_with_exit_code_2(ramp, caplog):
    r = ramp(levels="2,x")
    assert r.tick(1000.0) is None and r.environment.process_exit_code == 2
    assert "--levels must be comma-separated whole numbers, got '2,x'" in caplog.text


def test_a_level_at_its_longest():
    fixed = options(step_time="10", max_step_time=60.0, warmup=1.0, ramp_time=1.0, cooldown=2.0)
    assert level_bound_s(fixed, 10.0) == 1 + 60 + 10 + 2  # the warm-up may wait up to max-step-time
    assert level_bound_s(fixed, None) == 1 + 60 + 60 + 2
    assert level_bound_s(options(ramp_time=500.0), 10.0) == shape.REACH_TIMEOUT_S + 60 + 10
