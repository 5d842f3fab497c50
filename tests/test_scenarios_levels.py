"""vllm_stress.scenarios.shapes.levels: a ramp's options — parsing, checks, the bound of a run's length, the ETA line.
(Its refusals as the command line shows them: test_bad_input.py; the ETA of a level run past its pace:
test_progress.py.)"""

import math
import re
import time

import pytest

from vllm_stress.core.steady import MIN_LIFETIMES
from vllm_stress.scenarios.shapes.levels import (
    CHECK_INTERVAL_S,
    RAMP_DEFAULTS,
    RAMP_TIMES,
    LevelPace,
    LevelRule,
    check_times,
    clock,
    expected_level_s,
    expected_lifetime_s,
    longest_run_s,
    parse_levels,
    ramp_eta,
    step_seconds,
)


def test_levels_are_read_whatever_the_spaces_and_a_trailing_comma():
    assert parse_levels("10, 50 ,100,") == [10, 50, 100]
    assert parse_levels(7) == [7]
    assert parse_levels(RAMP_DEFAULTS["levels"]) == [10, 50, 100, 200, 500, 750, 1000]


def test_step_time_auto_has_no_seconds():
    assert step_seconds("auto") is None and step_seconds(" auto ") is None
    assert step_seconds("60") == 60.0 and step_seconds(2.5) == 2.5


def test_every_default_time_passes_its_own_check():
    check_times({flag: RAMP_DEFAULTS[flag] for flag in RAMP_TIMES})
    check_times({"step-time": "auto", "warmup": 0, "cooldown": "0.5"})


@pytest.mark.parametrize(
    ("times", "message"),
    [
        ({"warmup": "-1"}, "--warmup must be a number of seconds, at least 0, got '-1'"),
        ({"ramp-time": None}, "--ramp-time must be a number of seconds, at least 0, got None"),
        ({"step-time": "soon"}, "--step-time must be a number of seconds or auto, at least 0, got 'soon'"),
        ({"cooldown": "1", "max-step-time": "x"}, "--max-step-time must be a number of seconds, at least 0, got 'x'"),
    ],
)
def test_a_bad_time_is_refused_naming_its_flag(times, message):
    with pytest.raises(ValueError) as error:
        check_times(times)
    assert str(error.value) == message


def test_the_longest_run_bounds_every_level_at_its_longest():
    # per level: ramp 5 + cooldown 0 + warm-up up to max-step-time 600 + hold 60, and 30 s margin; 120 s overall
    assert longest_run_s({}) == 7 * (5 + 600 + 60 + 30) + 120
    # --step-time auto: the hold may last up to max-step-time too
    assert longest_run_s({"step-time": "auto"}) == 7 * (5 + 600 + 600 + 30) + 120
    smoke = {"levels": "2,4", "step-time": "3", "max-step-time": "10", "warmup": "0", "ramp-time": "1"}
    assert longest_run_s(smoke) == 2 * (1 + 10 + 3 + 30) + 120
    assert longest_run_s(smoke | {"cooldown": "2", "warmup": "20"}) == 2 * (1 + 2 + 20 + 3 + 30) + 120


def test_eta_of_the_first_level_is_the_latest_end_only():
    now = time.time()
    text = ramp_eta(now, [10, 50, 100], [], level_started=now, level_s=100, rule=LevelRule(5.0, None))
    assert text == f"the ramp ends by {clock(now + 300)} at the latest"


def test_a_lifetime_lies_midway_between_the_line_of_the_levels_done_and_littles_law_at_their_best_rate():
    flat = [LevelPace(10, 20.0, 5.0, 10.0, 2.0), LevelPace(50, 20.0, 5.0, 10.0, 2.0)]  # 5 and 25 requests/s
    assert expected_lifetime_s(20, flat) == 2.0  # no shorter than at the last level
    assert expected_lifetime_s(200, flat) == (2.0 + 200 / 25) / 2  # between no growth and no more rate
    rising = [LevelPace(users, 20.0, 5.0, 10.0, 0.8 + users / 50) for users in (10, 60, 110)]  # lifetime: a line
    assert expected_lifetime_s(210, rising) == pytest.approx((0.8 + 210 / 50 + 210 / (110 / 3.0)) / 2)
    one = [LevelPace(10, 20.0, 5.0, 10.0, 2.0)]  # one level: no line yet, the lifetime stays as it is at least
    assert expected_lifetime_s(100, one) == (2.0 + 100 / 5) / 2


def test_a_level_is_its_fixed_part_a_warm_up_of_lifetimes_as_before_and_the_hold_its_rule_gives():
    done = [
        LevelPace(10, 14.0, 2.0, 10.0, 1.0),
        LevelPace(60, 18.0, 4.0, 12.0, 2.0),
    ]  # 2 s besides; warm-up 2 lifetimes
    lifetime = (0.8 + 110 / 50 + 110 / 30) / 2  # the line through both, and 30 requests/s at best
    until_steady = expected_level_s(110, done, LevelRule(2.0, None))
    assert until_steady == pytest.approx(2 + 2 * lifetime + MIN_LIFETIMES * lifetime + CHECK_INTERVAL_S / 2)
    assert expected_level_s(110, done, LevelRule(2.0, 30.0)) == pytest.approx(2 + 2 * lifetime + 30)
    assert expected_level_s(110, done, LevelRule(60.0, 30.0)) == pytest.approx(2 + 60 + 30)  # --warmup is the least


def test_eta_adds_the_levels_left_and_never_passes_the_latest():
    now = time.time()  # levels 10 and 50 done: 5 s besides, warm-ups of 2.5 lifetimes; level 100 began 10 s ago
    done = [LevelPace(10, 20.0, 5.0, 10.0, 2.0), LevelPace(50, 20.0, 5.0, 10.0, 2.0)]
    rule = LevelRule(0.0, None)  # lifetimes 3 s at 100 users, 5 s at 200: levels of 5 + 7.5 + 11.5 and 5 + 12.5 + 17.5
    paced = ramp_eta(now, [100, 200], done, level_started=now - 10, level_s=300, rule=rule)
    assert paced == f"ETA {clock(now - 10 + 24 + 35)}, ends by {clock(now + 2 * 300)} at the latest"
    capped = ramp_eta(now, [100, 200], done, level_started=now - 10, level_s=30, rule=rule)
    assert capped == f"ETA {clock(now - 10 + 24 + 30)}, ends by {clock(now + 2 * 30)} at the latest"
    unmeasured = [LevelPace(10, 20.0, 5.0, 10.0, math.nan), LevelPace(50, 30.0, 5.0, 10.0, math.nan)]  # no request
    assert ramp_eta(now, [100], unmeasured, now, 60, rule).startswith(f"ETA {clock(now + 25)},")  # ended: mean length


def test_a_budget_caps_the_latest_end_and_leaves_out_the_levels_it_cuts():
    now = time.time()  # as above: level 100 ends 14 s from now, level 200 35 s after it
    done = [LevelPace(10, 20.0, 5.0, 10.0, 2.0), LevelPace(50, 20.0, 5.0, 10.0, 2.0)]
    rule = LevelRule(0.0, None)
    first = ramp_eta(now, [10, 50], [], level_started=now, level_s=300, rule=rule, deadline=now + 120)
    assert first == f"the ramp ends by {clock(now + 120)} at the latest (--max-minutes)"
    fits = ramp_eta(now, [100, 200], done, level_started=now - 10, level_s=300, rule=rule, deadline=now + 60)
    assert fits == f"ETA {clock(now + 49)}, ends by {clock(now + 60)} at the latest (--max-minutes)"
    cut = ramp_eta(now, [100, 200], done, level_started=now - 10, level_s=300, rule=rule, deadline=now + 40)
    assert cut == f"ETA {clock(now + 14)}, ends by {clock(now + 40)} at the latest (--max-minutes)"


def test_clock_is_local_hh_mm_ss():
    assert re.fullmatch(r"\d\d:\d\d:\d\d", clock(0)) and clock(0) == time.strftime("%H:%M:%S", time.localtime(0))
