"""vllm_stress.webui.progress: where the ramp is, for the LLM tab and the dashboard — the load shape's phase and the
levels held so far, from the suite's events of one environment (the tab and the dashboard in a browser:
test_webui.py)."""

import math
import time
from types import SimpleNamespace

import pytest
from locust.event import EventHook

from vllm_stress.core.steady import Verdict
from vllm_stress.master import hooks
from vllm_stress.webui.progress import RampProgress


@pytest.fixture
def clock(monkeypatch):
    """time.time() as the test sets it."""
    now = [1_700_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    return now


def environment():
    return SimpleNamespace(events=SimpleNamespace(test_start=EventHook()))


def test_the_phase_with_its_time_in_and_its_time_left(clock):
    env = environment()
    progress = RampProgress(env)
    assert progress.text() == ""  # no load shape: nothing to say
    hooks.phase_changed.fire(environment=env, text="Level 1/3 (2 users): holding", limit_s=60)
    clock[0] += 12.4
    assert progress.text() == "Level 1/3 (2 users): holding — 12 s in, at most 48 s left"
    clock[0] += 100
    assert progress.text() == "Level 1/3 (2 users): holding — 112 s in, at most 0 s left"
    hooks.phase_changed.fire(environment=env, text="Level 1/3 (2 users): warming up", limit_s=None)
    assert progress.text() == "Level 1/3 (2 users): warming up — 0 s in"
    hooks.phase_changed.fire(environment=environment(), text="another run's phase", limit_s=None)
    assert progress.text().startswith("Level 1/3")


def test_the_levels_held_are_kept_until_the_next_run_starts(clock):
    env = environment()
    progress = RampProgress(env)
    verdict = Verdict(True, "", 4.0, 0.5)
    hooks.level_ended.fire(environment=env, users=2, verdict=verdict, output_tokens_per_s=120.0)
    hooks.level_ended.fire(environment=env, users=4, verdict=None, output_tokens_per_s=math.nan)  # not judged
    hooks.level_ended.fire(environment=environment(), users=8, verdict=verdict, output_tokens_per_s=1.0)
    unsteady = Verdict(False, "the queue is still filling", 2.0, 1.0)
    hooks.level_ended.fire(
        environment=env, users=6, verdict=unsteady, output_tokens_per_s=200.0, schedule_lag_p99_s=0.3
    )
    assert [result["users"] for result in progress.level_results] == [2, 6]
    first, last = progress.level_results
    assert first["steady"] is True and first["output_tokens_per_s"] == 120.0 and math.isnan(first["schedule_lag_p99_s"])
    assert last == {
        "users": 6,
        "steady": False,
        "reason": "the queue is still filling",
        "output_tokens_per_s": 200.0,
        "schedule_lag_p99_s": 0.3,
        "e2e_p50_s": 1.0,
    }
    env.events.test_start.fire()
    assert progress.level_results == []
