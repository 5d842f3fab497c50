"""The steady-state rule (vllm_stress.core.steady) on arrays with known answers, and a ramp whose top level is too short
to be steady with a fixed hold and steady with --step-time auto."""

import json
import re

import numpy as np
import pytest

from benchmarks.harness import read_rows
from vllm_stress.analysis.io.synthetic import closed_loop_rows
from vllm_stress.core import steady
from vllm_stress.core.metrics import mean_in_flight, percentile, streamed_tokens
from vllm_stress.master.runrecorder import REPORT_LAG_S

T0 = 1_700_000_000.0
HELD_STEADY = re.compile(r"\((\d+) users\): held \d+ s: steady \(.*? over ([\d.]+) request lifetimes")  # console


def requests_of(rows) -> steady.Requests:
    start = rows["start_time"].to_numpy()
    ttft = rows["ttft_s"].to_numpy(float)
    return steady.Requests(
        start,
        rows["end_time"].to_numpy(),
        start + ttft,
        rows["completion_tokens"].to_numpy(float),
        rows["ok"].to_numpy(bool),
        rows["e2e_s"].to_numpy(),
        ttft,
    )


def test_a_closed_loop_is_steady_over_enough_lifetimes():
    rows = closed_loop_rows(10, T0, T0 + 200, 5.0)  # 10 users, 5 s requests
    verdict = steady.judge(T0 + 20, T0 + 120, requests_of(rows))
    assert verdict.steady and verdict.lifetimes == pytest.approx(20.0)
    assert verdict.reason == "the window's halves agree over 20.0 request lifetimes"


def test_a_window_shorter_than_three_lifetimes_is_not_steady():
    rows = closed_loop_rows(10, T0, T0 + 200, 5.0)
    verdict = steady.judge(T0 + 20, T0 + 32, requests_of(rows))
    assert not verdict.steady and verdict.hold_needed_s == pytest.approx(15.0)
    assert verdict.reason == "the 12 s window holds 2.4 request lifetimes (e2e p50 5.0 s); steady needs 3"


def test_a_queue_that_is_still_filling_is_not_steady():
    """Every user's requests take longer and longer, 2 s to 8 s (a queue building up): the halves disagree."""
    rows = closed_loop_rows(20, T0, T0 + 400, np.linspace(2.0, 8.0, 60), spread=0)
    verdict = steady.judge(T0 + 20, T0 + 220, requests_of(rows))
    assert not verdict.steady
    assert verdict.reason.startswith(("completions fell", "e2e p50 rose")), verdict.reason


def test_a_ttft_shift_small_against_the_lifetime_is_noise():
    """TTFT doubles from 10 to 20 ms inside 5 s requests: 0.2 % of a lifetime, steady."""
    rows = closed_loop_rows(10, T0, T0 + 200, 5.0)
    rows["ttft_s"] = np.where(rows["end_time"] < T0 + 70, 0.01, 0.02)
    assert steady.judge(T0 + 20, T0 + 120, requests_of(rows)).steady


def test_metrics_of_a_window():
    first, end, tokens = np.array([0.0, 5.0, 9.0]), np.array([10.0, 5.0, 9.0]), np.array([100.0, 7.0, 3.0])
    assert streamed_tokens(first, end, tokens, 2.0, 6.0) == pytest.approx(40.0 + 7.0)  # 4 s of 10 tok/s + a burst
    assert mean_in_flight(np.array([0.0, 1.0]), np.array([4.0, 2.0]), 0.0, 4.0) == pytest.approx(1.25)
    assert percentile(np.array([1.0, 2.0, 3.0, 4.0, np.nan]), 50) == 2.5  # linear, NaN left out


def levels_of(out) -> dict[int, dict]:
    summary = json.loads((out / "report" / "summary.json").read_text())
    return summary, {level["users"]: level for level in summary["levels"]}


@pytest.mark.parametrize("step_time", ["5", "auto"])
def test_a_level_too_short_to_be_steady_and_the_auto_hold_that_fixes_it(scenarios, tmp_path, capfd, step_time):
    """Two sequences at a time, 256-token answers: 2 users get about 0.6 s requests, 8 users queue behind them for
    four times that. A 5 s hold is several lifetimes at 2 users and about two at 8 (not steady, so 2 users is the
    peak whatever 8 users measured); --step-time auto holds 8 users until steady, and then its e2e p50 is what
    Little's law says a closed loop of 8 users gets: users / completed requests per second. The report judges an
    auto hold on the window the ramp judged live (the worker's last report before the verdict ends it)."""
    out = tmp_path / step_time
    code = scenarios(
        [
            "run",
            "--scenario",
            "smoke",
            "--out",
            str(out),
            "--workers",
            "1",
            "--simulator-arg=--max-num-seqs=2",
            "--locust-arg=--levels=2,8",
            f"--locust-arg=--step-time={step_time}",
            "--locust-arg=--max-step-time=120",
            "--locust-arg=--warmup=0",
            "--locust-arg=--output-tokens=256",
        ]
    )
    assert code == 0
    summary, levels = levels_of(out)
    assert levels[2]["steady"], levels[2]["steady_reason"]
    if step_time == "5":
        assert not levels[8]["steady"] and "request lifetimes" in levels[8]["steady_reason"]
        assert summary["peak"]["users"] == 2 and summary["unsteady_levels"] == [8]
        assert "Not steady, so left out of the peak" in (out / "report" / "report.md").read_text()
        return
    assert levels[8]["steady"], levels[8]["steady_reason"]
    little = 8 / levels[8]["requests_per_s"]
    assert levels[8]["e2e_p50_s"] == pytest.approx(little, rel=0.15)
    assert levels[8]["lifetimes"] >= steady.MIN_LIFETIMES
    judged_live = dict(HELD_STEADY.findall(capfd.readouterr().err))
    for users, level in levels.items():
        assert level["lifetimes"] == pytest.approx(float(judged_live[str(users)]), abs=0.06), users
    itl_counts = itl_gaps_by_level(out / "run-1")
    inside, around = (
        hold_gaps_by_level(out / "run-1", -MESSAGE_DELAY_S, -MESSAGE_DELAY_S),
        hold_gaps_by_level(out / "run-1", MESSAGE_DELAY_S, REPORT_LAG_S + MESSAGE_DELAY_S),
    )
    for users, count in itl_counts.items():  # ITL: the measured streams of the holds
        assert 0 < inside[users] <= count <= around[users], users


MESSAGE_DELAY_S = 0.5  # a worker counts gaps while the master's "hold on" message says so: it reaches it this late


def hold_gaps_by_level(run, start_margin_s: float, end_margin_s: float) -> dict[int, int]:
    """The inter-chunk gaps of the successful requests that ended during their level's hold widened by the margins
    at its start and end (narrowed when negative), from requests.csv. An auto hold's workers hear of its end up to a
    report interval after the end of the window it was judged on."""
    holds = {int(r["users"]): (float(r["hold_start"]), float(r["hold_end"])) for r in read_rows(run / "levels.csv")}
    gaps = dict.fromkeys(holds, 0)
    for row in read_rows(run / "requests.csv"):
        start, end = holds[int(row["users"])]
        if row["ok"] == "1" and start - start_margin_s <= float(row["end_time"]) < end + end_margin_s:
            gaps[int(row["users"])] += int(row["chunks"]) - 1
    return gaps


def itl_gaps_by_level(run) -> dict[int, int]:
    counts: dict[int, int] = {}
    for row in read_rows(run / "itl_histogram.csv"):
        counts[int(row["users"])] = counts.get(int(row["users"]), 0) + int(row["count"])
    return counts
