"""Where a headless ramp is, on its console: one line per phase change with the ramp's ETA, "Run k of n" when the
scenario runner repeats, and nothing else added to Locust's own output."""

from __future__ import annotations

import re
import time

from vllm_stress.scenarios.shapes.levels import LevelPace, LevelRule, clock, ramp_eta

PHASES = ("ramping up", "warming up", "holding", "held")


def test_repeated_runs_print_one_line_per_phase_with_run_k_of_n(scenarios, tmp_path, capfd):
    code = scenarios(
        [
            "run",
            "--scenario",
            "smoke",
            "--out",
            str(tmp_path / "smoke"),
            "--repeats",
            "2",
            "--workers",
            "1",
            "--locust-arg=--step-time=2",
            "--locust-arg=--warmup=0",
        ]
    )
    assert code == 0
    output = capfd.readouterr()
    lines = (output.out + output.err).splitlines()
    phase_lines = [line.split("INFO/shape: ", 1)[1] for line in lines if "INFO/shape: " in line]
    expected = [(run, level, users, phase) for run in (1, 2) for level, users in ((1, 2), (2, 4)) for phase in PHASES]
    got = [
        re.match(r"Run (\d) of 2 · Level (\d)/2 \((\d) users\): (ramping up|warming up|holding|held)", line)
        for line in phase_lines
    ]
    assert [(int(m[1]), int(m[2]), int(m[3]), m[4]) for m in got if m] == expected, phase_lines
    clock = r"\d\d:\d\d:\d\d"
    for line in phase_lines:  # every line but a level's verdict says when the ramp ends
        if " held " not in line:
            assert re.search(rf"; (the ramp|ETA {clock},) ends by {clock} at the latest$", line), line
    second_levels = [line for line in phase_lines if "Level 2/2" in line and " held " not in line]
    assert all(re.search(rf"; ETA {clock}, ends by", line) for line in second_levels), second_levels
    for line in lines:  # an ETA is never in the past: not before its own line's time (to the second it was cut to)
        if eta := re.search(rf"(\d\d:\d\d:\d\d),\d+\].*; ETA ({clock}),", line):
            assert seconds_of_day(eta[2]) >= seconds_of_day(eta[1]) - 1, line
    ours = [line for line in lines if re.search(r"INFO/(locustfiles|scenarios\.shape|shape)", line)]
    periodic = [line for line in ours if "| output" in line]
    assert not periodic, periodic  # no progress line every few seconds besides the phases


def test_eta_counts_a_level_that_runs_past_the_pace_from_now():
    now = time.time()  # level 1: 2 s besides, a warm-up of 2 lifetimes of 1 s, a hold of 6 s; level 2 has run for 50 s:
    done = [LevelPace(1, 10.0, 2.0, 6.0, 1.0)]  # it ends now; level 3 (lifetime (1 + 3) / 2 s) takes 2 + 4 + 6 s
    text = ramp_eta(now, [2, 3], done, level_started=now - 50, level_s=600, rule=LevelRule(0.0, 6.0))
    assert text == f"ETA {clock(now + 12)}, ends by {clock(now + 2 * 600)} at the latest"


def seconds_of_day(hh_mm_ss: str) -> int:
    hours, minutes, seconds = map(int, hh_mm_ss.split(":"))
    return hours * 3600 + minutes * 60 + seconds
