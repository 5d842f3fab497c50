"""Load shapes beyond the step ramp (vllm_stress.scenarios.shapes.stretches, .timed): a spike, a compressed day and a
trace's own rate as stretches of users, and a timed shape ticked on a clock of the test's, each stretch's first run
at a user count a judged level, a later one at the same count not."""

from __future__ import annotations

import time

import gevent
import pytest

from tests.test_shape import Ramp, ended
from vllm_stress.client.trace import TraceArrivals, TraceLine
from vllm_stress.master import hooks
from vllm_stress.scenarios.shapes.stretches import Stretch, sinusoid, stretches_of, total_s


def test_a_spike_is_base_peak_base():
    assert stretches_of("spike:4,16,10,20,45") == [Stretch(4, 10), Stretch(16, 20), Stretch(4, 15)]
    assert stretches_of("spike:4,16,10,35,45") == [Stretch(4, 10), Stretch(16, 35)]  # ends at its peak
    assert stretches_of("steps") is None


def test_a_sinusoid_day_runs_low_at_midnight_high_at_noon():
    day = sinusoid(2, 10)
    assert len(day) == 24 and day[0] == day[-1] == 2 and day[11] == day[12] == 10
    assert day[:12] == sorted(day[:12])  # rises until noon
    stretches = stretches_of("diurnal:2,2,10")
    assert total_s(stretches) == pytest.approx(120)
    assert [s.users for s in stretches] == [2, 3, 4, 5, 7, 8, 9, 10, 9, 8, 7, 5, 4, 3, 2]  # equal hours merged
    assert stretches[7] == Stretch(10, pytest.approx(4 * 5))  # four hours at 10 users, 5 s each


def test_a_table_of_hourly_levels_shares_the_day_equally():
    assert stretches_of("diurnal:1,2/4/4/8") == [Stretch(2, 15), Stretch(4, 30), Stretch(8, 15)]


def test_a_traces_rate_gives_each_window_its_arrivals_as_users():
    lines = [TraceLine(at, 100, 10) for at in (0.0, 0.5, 1.2, 4.1, 4.2, 4.3, 5.5)]
    # windows of 2 s: [0, 2) 3 arrivals, [2, 4) none (1 user: the open loop's least), [4, 6) 4
    assert stretches_of("trace:2", lines) == [Stretch(3, 2), Stretch(1, 2), Stretch(4, 2)]


def test_a_soak_is_one_constant_stretch_of_its_users_or_the_last_level():
    assert stretches_of("soak:0.005,3") == [Stretch(3, pytest.approx(18))]
    assert stretches_of("soak:2", last_level=8) == [Stretch(8, 7200)]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ramp:1,2", "--shape must be steps | spike:"),
        ("spike:4,16,10", "--shape must be"),
        ("spike:4,16,40,20,45", "AT_S + FOR_S <= TOTAL_S"),
        ("spike:4,1.5,10,20,45", "whole numbers, at least 1"),
        ("diurnal:1,2/x", "numbers expected"),
        ("diurnal:1,0,4", "at least 1"),
        ("trace:10", "needs --trace"),
        ("soak:0", "HOURS must be above 0"),
        ("soak:1,2,3", "--shape must be"),
        ("soak:1,0.5", "whole numbers, at least 1"),
    ],
)
def test_what_a_shape_refuses(text, message):
    with pytest.raises(ValueError, match=message.replace("|", r"\|").replace("+", r"\+")):
        stretches_of(text)


@pytest.fixture
def spike(monkeypatch):
    """A 30 s spike from 2 to 6 users at 10 s for 10 s, warm-ups of 2 s, on a clock of the test's."""
    made = Ramp(monkeypatch, shape="spike:2,6,10,10,30", warmup=2.0)
    yield made
    made.close()


def test_a_timed_spike_judges_base_and_peak_once_each(spike):
    r = spike
    started: list[tuple[int, bool]] = []

    def on_started(environment, users, judged=True, **_kw):
        if environment is r.environment:
            started.append((users, judged))

    hooks.level_started.add_listener(on_started)
    try:
        assert r.tick(1000.0) == (2, 2.0)  # 2 users over --ramp-time 1 s
        r.tick(1002.5)  # past the warm-up: held
        r.rows(*(ended(2, 1003.0 + i / 2) for i in range(12)))
        assert r.tick(1010.0) == (6, 4.0)  # the spike: 4 more users over 1 s; the base level judged
        r.tick(1012.5)
        r.rows(*(ended(6, 1013.0 + i / 4) for i in range(24)))
        assert r.tick(1020.0) == (2, 4.0)  # back to base, not judged again
        assert r.tick(1029.0) == (2, 4.0)
        assert r.tick(1030.0) is None  # the shape's 30 s are over
    finally:
        hooks.level_started.remove_listener(on_started)
    assert started == [(2, True), (6, True), (2, False)]
    assert [users for users, *_ in r.ended] == [2, 6]
    assert r.phases[-1] == "Stretch 3/3: 2 users for 10 s (judged before: not a level)"


def test_a_user_stopped_while_it_waits_gives_its_trace_line_back():
    """A trace shape lowers the users between windows: a user stopped while it sleeps until its line's time gives the
    line back, so the next waiter sends it and the replay loses none."""
    lines = [TraceLine(60.0, 100, 10), TraceLine(61.0, 100, 10)]
    arrivals = TraceArrivals(lines)
    arrivals.start_at(time.perf_counter())
    waiting = gevent.spawn(arrivals.wait)
    gevent.sleep(0)  # it took the first line and sleeps until its time
    waiting.kill()
    assert arrivals.returned == [lines[0]] and arrivals.summary().startswith("Trace replay: 0 of 2 lines sent")
    assert arrivals.take() == lines[0] and arrivals.take() == lines[1]
