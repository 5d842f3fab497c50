"""Repeat statistics, peak, saturation, knee, scaling and recommendations on hand-checkable tables."""

import math

import pandas as pd
import pytest

from vllm_stress.analysis import stats
from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.analysis.report.pipeline import analyse


def curve(throughput: list[float], p99: list[float] | None = None) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "users": [10, 20, 40, 80],
            "output_tokens_per_s": throughput,
            "e2e_p99_s": p99 or [10.0, 10.0, 10.0, 10.0],
        }
    )


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.7062), (4, 2.7764), (30, 2.0423), (31, 2.0395), (60, 2.0003), (120, 1.9799), (10_000, 1.9602)],
)
def test_t_quantile(df, expected):
    assert stats.t_975(df) == pytest.approx(expected, abs=1e-4)


def test_t_quantile_undefined_for_one_sample():
    assert math.isnan(stats.t_975(0))


@pytest.mark.parametrize(
    ("sd_a", "n_a", "sd_b", "n_b", "expected"),
    [
        (10.0, 2, 10.0, 2, 4.3027 * 10),  # df = 2
        (2.0, 5, 6.0, 10, 2.1788 * math.sqrt(4.4)),  # df = 4.4² / (0.8² / 4 + 3.6² / 9) = 12.1, rounded down
        (0.0, 3, 3.0, 4, 3.1824 * 1.5),  # only one side varies: its own n - 1 = 3 degrees of freedom
        (0.0, 3, 0.0, 4, 0.0),  # neither varies: any change is outside the noise
    ],
)
def test_welch_confidence_interval_of_a_difference(sd_a, n_a, sd_b, n_b, expected):
    assert stats.welch_ci95(sd_a, n_a, sd_b, n_b) == pytest.approx(expected, rel=1e-4)


def test_repeats_give_mean_std_and_student_ci():
    per_run = pd.DataFrame(
        {
            "users": [10, 10, 10, 20, 20, 20],
            "run": [0, 1, 2, 0, 1, 2],
            "output_tokens_per_s": [90.0, 100.0, 110.0, 199.0, 200.0, 201.0],
            "partial": [False] * 6,
            "steady": [True] * 6,
            "steady_reason": ["agree"] * 6,
        }
    )
    levels = stats.aggregate_repeats(per_run).set_index("users")
    assert levels["output_tokens_per_s"].tolist() == [100.0, 200.0]
    assert levels["output_tokens_per_s_std"].tolist() == pytest.approx([10.0, 1.0])
    half_width = 4.3027 / math.sqrt(3)  # t(0.975, 2) / sqrt(n)
    assert levels["output_tokens_per_s_ci95"].tolist() == pytest.approx([10 * half_width, half_width], abs=1e-3)
    assert levels.loc[10, "unstable"] == ["output_tokens_per_s"]  # CI 24.8 % of the mean
    assert levels.loc[20, "unstable"] == []
    assert levels["runs"].tolist() == [3, 3]


def test_confidence_interval_counts_only_the_runs_with_a_value():
    per_run = pd.DataFrame(
        {
            "users": [10, 10, 10],
            "run": [0, 1, 2],
            "ttft_p50_s": [1.0, 3.0, float("nan")],  # the third run had no successful request at this level
            "partial": [False] * 3,
            "steady": [True, True, False],
            "steady_reason": ["agree", "agree", "no measured request of the level ended in the window"],
        }
    )
    level = stats.aggregate_repeats(per_run).iloc[0]
    assert level["ttft_p50_s"] == 2.0 and level["ttft_p50_s_std"] == pytest.approx(math.sqrt(2))
    assert level["ttft_p50_s_ci95"] == pytest.approx(12.7062 * math.sqrt(2) / math.sqrt(2))  # n = 2, df = 1
    assert not level["steady"]
    assert level["steady_reason"] == "1 of 3 runs unsteady: no measured request of the level ended in the window"


def test_single_run_has_no_spread_fields():
    per_run = pd.DataFrame(
        {
            "users": [10],
            "run": [0],
            "output_tokens_per_s": [5.0],
            "partial": [True],
            "steady": [True],
            "steady_reason": ["agree"],
        }
    )
    levels = stats.aggregate_repeats(per_run)
    assert "output_tokens_per_s_std" not in levels and "unstable" not in levels
    assert levels["partial"].tolist() == [True]


def test_underloaded_below_ninety_percent_of_users_in_flight():
    levels = pd.DataFrame({"users": [10, 10, 100], "concurrency_mean": [9.0, 8.99, 42.0]})
    assert stats.underloaded(levels).tolist() == [False, True, True]


def test_bound_names_the_limit_of_each_level():
    nan = float("nan")
    levels = pd.DataFrame(
        {
            "users": [8, 16, 16, 16, 16, 16, 200, 16, 16],
            "server_in_system_mean": [7.8, 15.7, 4.0, 15.6, 6.0, nan, 199.6, 4.0, 3.5],
            "server_waiting_mean": [0.2, 7.7, 0.0, 0.3, 0.0, nan, 4.0, 0.0, 0.0],  # 200: 2 % queued, a prefill budget
            "server_http_held_mean": [nan, nan, nan, nan, nan, nan, nan, 4.2, 15.8],
            "client_cpu_max_percent": [40.0, 95.0, 30.0, 97.0, 99.0, nan, 20.0, 10.0, 10.0],
        }
    )
    assert stats.bounds(levels).tolist() == [
        "",
        "server-bound: waiting requests (a load generator at 95 % CPU: client timings inflated)",
        "client/gateway- or frontend-bound (the server's engine held 4 of 16; no HTTP-layer metrics to tell which)",
        "client-bound (a load generator at 97 % CPU)",
        "client-bound (a load generator at 99 % CPU; the server's engine held 6 of 16; no HTTP-layer metrics to tell "
        "which)",
        "",
        "",
        "client/gateway-bound (vLLM's HTTP layer held 4 of 16)",
        "frontend-bound (vLLM's HTTP layer held 16 of 16, its engine 4)",
    ]


def test_a_starved_load_generator_and_a_saturated_frontend_are_named():
    levels = pd.DataFrame(
        {
            "users": [16, 16, 16],
            "server_in_system_mean": [4.0, 4.0, 15.5],
            "server_waiting_mean": [0.0, 0.0, 0.0],
            "server_http_held_mean": [4.2, 4.2, 15.8],
            "server_frontend_cpu_percent": [30.0, 97.0, 30.0],
            "client_cpu_max_percent": [5.0, 5.0, 5.0],
            "client_loop_lag_max_ms": [45.0, 2.0, 2.0],
        }
    )
    assert stats.bounds(levels).tolist() == [
        "client-bound (a load generator's event loop 45 ms late; vLLM's HTTP layer held 4 of 16)",
        "frontend-bound (vLLM's API server process at 97 % CPU)",
        "",
    ]


def test_peak_and_saturation_within_five_percent():
    levels = curve([100.0, 190.0, 196.0, 200.0])
    assert stats.peak_level(levels)["users"] == 80
    assert stats.saturation_users(levels) == 20  # 190 = 95 % of 200, inclusive
    assert stats.saturation_users(curve([100.0, 189.0, 196.0, 200.0])) == 40


def test_kneedle_knee():
    # users scaled: 0, 1/7, 3/7, 1; throughput scaled: 0, 0.9, 0.96, 1 -> excess largest at 20.
    assert stats.knee_users(curve([100.0, 190.0, 196.0, 200.0])) == 20
    assert stats.knee_users(curve([10.0, 20.0, 40.0, 80.0])) is None  # a straight line has no knee
    assert stats.knee_users(curve([100.0, 190.0, 196.0, 200.0]).iloc[:2]) is None


def test_scaling_factor():
    assert stats.scaling_factor(curve([100.0, 190.0, 196.0, 250.0]), 10, 80) == 2.5


def test_recommendations():
    levels = curve([100.0, 150.0, 196.0, 200.0], p99=[10.0, 12.0, 16.0, 30.0])
    # At least 60 % of 200 tok/s: levels 20, 40 and 80; the lowest p99 of those is 20's. Saturation (>= 190): 40.
    assert stats.recommendations(levels) == {"low_latency": 10, "balanced": 20, "high_throughput": 40}


DEMO = pd.DataFrame(  # the demo scenario's report (the simulator's default profile), output tok/s and p99 e2e
    {
        "users": [10, 50, 100, 200, 500, 1000],
        "output_tokens_per_s": [771.0, 1392.0, 1530.0, 1709.0, 1706.0, 1702.0],
        "e2e_p99_s": [1.68, 4.75, 8.31, 15.19, 39.02, 76.73],
    }
)


def test_balanced_is_a_trade_off_where_latency_grows_from_the_first_step():
    """The former rule (p99 e2e within 1.5x the smallest level's) kept only 10 users here: balanced was low latency,
    at 45 % of the peak. 50 users give 81 % of it at a third of the saturation point's p99."""
    assert stats.recommendations(DEMO) == {"low_latency": 10, "balanced": 50, "high_throughput": 200}


@pytest.mark.parametrize(
    ("p99", "expected"),
    [
        ([1.0, 5.0, 4.0, 9.0], 40),  # 40 users beat 20 on both counts
        ([1.0, 5.0, 5.0, 9.0], 20),  # a tie: the smaller level
        ([1.0, math.nan, 5.0, 9.0], 40),  # a level without a p99 e2e is not chosen for its latency
        ([math.nan] * 4, 20),  # none has one: the smallest level with enough throughput
    ],
)
def test_balanced_takes_the_lowest_p99_among_the_levels_with_enough_throughput(p99, expected):
    assert stats.balanced_users(curve([100.0, 150.0, 196.0, 200.0], p99=p99)) == expected


def test_analyse_three_repeats_end_to_end(tmp_path):
    """Three runs of closed loops of 10 s requests: level 10's requests carry 90, 100 or 110 output tokens (and 4x as
    many prompt tokens), so 10 users give 90, 100, 110 output tok/s; level 20 gives 20 x 100 / 10 = 200 each."""
    dirs = []
    levels = step_levels([10, 20], hold_s=100.0)
    for index, output_10 in enumerate([90, 100, 110]):
        parts = []
        for (users, ramp_start, _, hold_end), output in zip(levels, [output_10, 100], strict=True):
            parts.append(
                closed_loop_rows(users, ramp_start, hold_end, 10.0, completion_tokens=output, prompt_tokens=4 * output)
            )
        dirs.append(write_run(tmp_path / f"r{index}", pd.concat(parts), levels, meta={"model": "m", "complete": True}))
    summary = analyse(dirs, tmp_path / "out", gpus=2)
    assert summary["runs"] == 3
    level_10, level_20 = summary["levels"]
    assert level_10["output_tokens_per_s"] == pytest.approx(100.0)
    assert level_10["output_tokens_per_s_std"] == pytest.approx(10.0)
    assert level_10["output_tokens_per_s_ci95"] == pytest.approx(10 * 4.3027 / math.sqrt(3), abs=1e-3)
    assert level_10["total_tokens_per_s"] == pytest.approx(500.0)
    assert level_20["output_tokens_per_s_std"] == pytest.approx(0.0)
    assert level_10["unstable"] == ["output_tokens_per_s", "total_tokens_per_s"]
    assert summary["peak"]["users"] == 20
    assert summary["peak"]["total_tokens_per_s_per_gpu"] == pytest.approx(500.0)
    assert "unstable: output_tokens_per_s" in (tmp_path / "out" / "report.md").read_text()
