"""The MI325X tuning guide's tables turned into run data: the report must find the peaks, saturation points and the
cross-model figures the guide publishes.

Each level is a closed loop (``vllm_stress.analysis.io.synthetic.closed_loop_rows``): ``loops`` users, each repeating a
cycle of 20 requests of 2,048 prompt + 512 output tokens back to back — one taking the table's p99 latency, 19 taking
the rest of the cycle (about 60 % of p99) — with the cycle length set so that the loops produce the table's tok/s (the
guide's numbers read as total tok/s, see docs/concepts/vllm-scheduler.md §8). The hold is a whole number of cycles
(about 2,560 s), so each user contributes whole cycles to it: total tok/s = loops x 20 x 2,560 / cycle equals the table
exactly, output tok/s is a fifth of it, and 1 request in 20 ended in the window takes p99, so the p99 e2e equals the
table. Loops = the users in flight by Little's law at these latencies, at most the level's users."""

import json

import pandas as pd
import pytest

from vllm_stress.analysis.io.synthetic import closed_loop_rows, write_run
from vllm_stress.analysis.report.pipeline import analyse

USERS = [10, 50, 100, 200, 500, 750, 1000]
TOKENS = 2048 + 512  # per request
GUIDE_TABLES = {  # model: [(total tok/s, p99 latency s) per level of USERS]
    "Qwen3-VL-235B": [
        (1902, 9.24),
        (6961, 12.50),
        (11198, 15.46),
        (11193, 15.46),
        (11209, 15.44),
        (11208, 15.44),
        (11218, 15.43),
    ],
    "Llama-3.1-405B": [
        (1090, 16.17),
        (4381, 20.14),
        (6802, 25.84),
        (6674, 26.33),
        (6804, 25.84),
        (6808, 25.83),
        (6798, 25.84),
    ],
    "DeepSeek V3.2": [
        (2857, 22.76),
        (5694, 23.49),
        (5518, 24.22),
        (5486, 24.14),
        (5657, 23.46),
        (5550, 23.96),
        (5786, 23.01),
    ],
    "Kimi-K2.5": [
        (225, 77.83),
        (583, 149.39),
        (948, 183.35),
        (950, 182.96),
        (948, 183.23),
        (947, 183.54),
        (952, 182.52),
    ],
}
# The guide's "Peak Throughput & Saturation" and "Cross-Model Analysis" tables.
GUIDE_PEAKS = {  # model: (peak tok/s, saturation, p99 @ peak, peak per GPU, scaling 10->200)
    "Qwen3-VL-235B": (11218, 100, 15.43, "1,402", "5.9x"),
    "Llama-3.1-405B": (6808, 100, 25.83, "851", "6.1x"),
    "DeepSeek V3.2": (5786, 50, 23.01, "723", "1.9x"),
    "Kimi-K2.5": (952, 100, 182.52, "238", "4.2x"),
}
GPUS = {"*": 8, "Kimi-K2.5": 4}


def guide_level(users: int, tokens_per_s: float, p99: float) -> tuple[int, list[float], float]:
    """Loops, one cycle of request latencies and the hold (whole cycles, about 2,560 s) of one table row."""
    loops = min(users, round(tokens_per_s * 12.4 * p99 / (20 * TOKENS)))  # 12.4 = 1 + 19 x 0.6 (p99s per cycle)
    cycle_s = loops * 20 * TOKENS / tokens_per_s
    assert 0 < cycle_s - p99 < 19 * p99  # the other 19 requests are shorter than p99
    return loops, [p99] + [(cycle_s - p99) / 19] * 19, max(1, round(2560 / cycle_s)) * cycle_s


def guide_run(table: list[tuple[int, float]]) -> tuple[pd.DataFrame, list[tuple]]:
    """The requests and levels.csv rows of one table: each level ramps for at least one cycle (every user has
    started) and 200 s (the previous level's last requests, up to 184 s, have ended), then holds."""
    parts, levels, ramp_start = [], [], 1.7e9
    for users, (tokens_per_s, p99) in zip(USERS, table, strict=True):
        loops, cycle, hold_s = guide_level(users, tokens_per_s, p99)
        hold_start = ramp_start + max(sum(cycle), 200.0)
        levels.append((users, ramp_start, hold_start, hold_start + hold_s))
        parts.append(closed_loop_rows(users, ramp_start, hold_start + hold_s, cycle, loops=loops))
        ramp_start = hold_start + hold_s
    return pd.concat(parts, ignore_index=True), levels


@pytest.fixture(scope="module")
def guide_summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("guide")
    dirs = [
        write_run(root / f"run{index}", *guide_run(table), meta={"model": model, "complete": True})
        for index, (model, table) in enumerate(GUIDE_TABLES.items())
    ]
    summary = analyse(dirs, root / "out", gpus=GPUS, scaling=(10, 200))
    return summary, root / "out"


@pytest.mark.parametrize("model", list(GUIDE_PEAKS))
def test_peak_and_saturation_as_the_guide_states(guide_summary, model):
    peak_tokens, saturation, p99_at_peak, _, _ = GUIDE_PEAKS[model]
    config = guide_summary[0]["configs"][model]
    assert config["peak"]["total_tokens_per_s"] == pytest.approx(peak_tokens)
    assert config["peak"]["output_tokens_per_s"] == pytest.approx(peak_tokens / 5)
    assert config["peak"]["e2e_p99_s"] == pytest.approx(p99_at_peak, abs=1e-4)
    assert config["saturation_users"] == saturation
    assert config["knee_users"] == saturation
    assert config["levels"][0]["success_rate"] == 1.0


def test_every_level_reproduces_the_table(guide_summary):
    for model, table in GUIDE_TABLES.items():
        levels = guide_summary[0]["configs"][model]["levels"]
        assert [level["users"] for level in levels] == USERS
        assert [level["total_tokens_per_s"] for level in levels] == pytest.approx([row[0] for row in table])
        assert [level["e2e_p99_s"] for level in levels] == pytest.approx([row[1] for row in table], abs=1e-4)


def test_cross_model_table(guide_summary):
    summary, out = guide_summary
    expected_per_gpu = {"Qwen3-VL-235B": 1402.25, "Llama-3.1-405B": 851.0, "DeepSeek V3.2": 723.25, "Kimi-K2.5": 238.0}
    expected_scaling = {"Qwen3-VL-235B": 5.9, "Llama-3.1-405B": 6.1, "DeepSeek V3.2": 1.9, "Kimi-K2.5": 4.2}
    for model, config in summary["configs"].items():
        assert config["peak"]["total_tokens_per_s_per_gpu"] == pytest.approx(expected_per_gpu[model])
        assert round(config["scaling"]["factor"], 1) == expected_scaling[model]
    report = (out / "report.md").read_text()
    table = {line.split(" | ")[0].lstrip("| "): line for line in report.splitlines() if line.startswith("| ")}
    assert table["Peak total tok/s per GPU"].count(" (8 GPUs)") == 3
    for peak, saturation, p99, per_gpu, scaling in GUIDE_PEAKS.values():
        assert f"{peak:,}" in table["Peak total tok/s"]
        assert f"~{saturation}" in table["Saturation point (users)"]
        assert f"{p99:.2f} s" in table["p99 e2e @ peak"]
        assert per_gpu in table["Peak total tok/s per GPU"]
        assert f"{scaling} (10→200)" in table["Scaling"]


def test_guide_levels_above_100_never_had_their_users_in_flight(guide_summary):
    # Little's law (docs/concepts/vllm-scheduler.md §8): 11,218 tok/s / 2,560 tokens = 4.4 req/s x ~9.6 s mean e2e
    # = ~42 requests in flight, whatever the nominal concurrency; the report flags such levels.
    qwen = guide_summary[0]["configs"]["Qwen3-VL-235B"]["levels"]
    assert qwen[-1]["concurrency_mean"] == pytest.approx(42.0)  # the 42 loops, each always with a request in flight
    assert all(level["underloaded"] for level in qwen)


def test_recommendations_for_qwen_match_the_guide(guide_summary):
    # The guide: low latency 1-10, balanced 50, high throughput 100+.
    qwen = guide_summary[0]["configs"]["Qwen3-VL-235B"]
    assert qwen["recommendations"] == {"low_latency": 10, "balanced": 50, "high_throughput": 100}
    report = (guide_summary[1] / "report.md").read_text()
    assert "| Qwen3-VL-235B | balanced | 50 | 1,392 | 6,961 | 62.1 % | 12.50 s |" in report  # 6,961 of 11,218


def test_summary_json_is_the_returned_summary(guide_summary):
    summary, out = guide_summary
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["runs"] == 4 and set(summary["configs"]) == set(GUIDE_TABLES)
