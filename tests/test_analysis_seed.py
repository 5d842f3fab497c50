"""The MI325X tables of seed 001 turned into run data: the report must find the peaks, saturation points and the
cross-model figures the seed publishes.

Each level holds for 2,560 s and gets as many requests (2,048 prompt + 512 output tokens, ending inside the hold)
as the table's tok/s, so the level's total tok/s equals the table exactly (the seed's numbers read as total tok/s,
see reference/vllm-behaviour.md §4.3) and output tok/s is a fifth of it. The slowest 5 % of each level's requests
take the table's p99 latency and the rest 60 % of it, so the level's p99 e2e equals the table.
"""

import json

import numpy as np
import pandas as pd
import pytest

from analysis.report import analyse
from analysis.synthetic import request_rows, step_levels, write_run

USERS = [10, 50, 100, 200, 500, 750, 1000]
HOLD_S = 2560.0  # total tokens per request, so requests = tok/s
SEED_TABLES = {  # model: [(total tok/s, p99 latency s) per level of USERS]
    "Qwen3-VL-235B": [(1902, 9.24), (6961, 12.50), (11198, 15.46), (11193, 15.46), (11209, 15.44), (11208, 15.44), (11218, 15.43)],
    "Llama-3.1-405B": [(1090, 16.17), (4381, 20.14), (6802, 25.84), (6674, 26.33), (6804, 25.84), (6808, 25.83), (6798, 25.84)],
    "DeepSeek V3.2": [(2857, 22.76), (5694, 23.49), (5518, 24.22), (5486, 24.14), (5657, 23.46), (5550, 23.96), (5786, 23.01)],
    "Kimi-K2.5": [(225, 77.83), (583, 149.39), (948, 183.35), (950, 182.96), (948, 183.23), (947, 183.54), (952, 182.52)],
}  # fmt: skip
# The seed's "Peak Throughput & Saturation" and "Cross-Model Analysis" tables.
SEED_PEAKS = {  # model: (peak tok/s, saturation, p99 @ peak, peak per GPU, scaling 10->200)
    "Qwen3-VL-235B": (11218, 100, 15.43, "1,402", "5.9x"),
    "Llama-3.1-405B": (6808, 100, 25.83, "851", "6.1x"),
    "DeepSeek V3.2": (5786, 50, 23.01, "723", "1.9x"),
    "Kimi-K2.5": (952, 100, 182.52, "238", "4.2x"),
}
GPUS = {"*": 8, "Kimi-K2.5": 4}


def seed_rows(table: list[tuple[int, float]], levels: list[tuple]) -> pd.DataFrame:
    parts = []
    for (users, _, hold_start, _), (tokens_per_s, p99) in zip(levels, table, strict=True):
        count = tokens_per_s  # one 2,560-token request per tok/s over a 2,560 s hold
        ends = hold_start + (np.arange(count) + 0.5) * HOLD_S / count
        e2e = np.where(np.arange(count) % 20 == 0, p99, 0.6 * p99)
        parts.append(request_rows(users, ends, e2e, prompt_tokens=2048, completion_tokens=512))
    return pd.concat(parts, ignore_index=True)


@pytest.fixture(scope="module")
def seed_summary(tmp_path_factory):
    root = tmp_path_factory.mktemp("seed")
    levels = step_levels(USERS, HOLD_S, ramp_s=30.0)
    dirs = [
        write_run(root / f"run{index}", seed_rows(table, levels), levels, meta={"model": model, "complete": True})
        for index, (model, table) in enumerate(SEED_TABLES.items())
    ]
    summary = analyse(dirs, root / "out", gpus=GPUS, scaling=(10, 200))
    return summary, root / "out"


@pytest.mark.parametrize("model", list(SEED_PEAKS))
def test_peak_and_saturation_as_the_seed_states(seed_summary, model):
    peak_tokens, saturation, p99_at_peak, _, _ = SEED_PEAKS[model]
    config = seed_summary[0]["configs"][model]
    assert config["peak"]["total_tokens_per_s"] == pytest.approx(peak_tokens)
    assert config["peak"]["output_tokens_per_s"] == pytest.approx(peak_tokens / 5)
    assert config["peak"]["e2e_p99_s"] == pytest.approx(p99_at_peak, abs=1e-4)
    assert config["saturation_users"] == saturation
    assert config["knee_users"] == saturation
    assert config["levels"][0]["success_rate"] == 1.0


def test_every_level_reproduces_the_table(seed_summary):
    for model, table in SEED_TABLES.items():
        levels = seed_summary[0]["configs"][model]["levels"]
        assert [level["users"] for level in levels] == USERS
        assert [level["total_tokens_per_s"] for level in levels] == pytest.approx([row[0] for row in table])
        assert [level["e2e_p99_s"] for level in levels] == pytest.approx([row[1] for row in table], abs=1e-4)


def test_cross_model_table(seed_summary):
    summary, out = seed_summary
    expected_per_gpu = {"Qwen3-VL-235B": 1402.25, "Llama-3.1-405B": 851.0, "DeepSeek V3.2": 723.25, "Kimi-K2.5": 238.0}
    expected_scaling = {"Qwen3-VL-235B": 5.9, "Llama-3.1-405B": 6.1, "DeepSeek V3.2": 1.9, "Kimi-K2.5": 4.2}
    for model, config in summary["configs"].items():
        assert config["peak"]["total_tokens_per_s_per_gpu"] == pytest.approx(expected_per_gpu[model])
        assert round(config["scaling"]["factor"], 1) == expected_scaling[model]
    report = (out / "report.md").read_text()
    table = {line.split(" | ")[0].lstrip("| "): line for line in report.splitlines() if line.startswith("| ")}
    assert table["Peak total tok/s per GPU"].count(" (8 GPUs)") == 3
    for peak, saturation, p99, per_gpu, scaling in SEED_PEAKS.values():
        assert f"{peak:,}" in table["Peak total tok/s"]
        assert f"~{saturation}" in table["Saturation point (users)"]
        assert f"{p99:.2f} s" in table["p99 e2e @ peak"]
        assert per_gpu in table["Peak total tok/s per GPU"]
        assert f"{scaling} (10→200)" in table["Scaling"]


def test_seed_levels_above_100_never_had_their_users_in_flight(seed_summary):
    # Little's law (reference/vllm-behaviour.md §4.3): 11,218 tok/s / 2,560 tokens = 4.4 req/s x ~9.3 s mean e2e
    # = ~42 requests in flight, whatever the nominal concurrency; the report flags such levels.
    qwen = seed_summary[0]["configs"]["Qwen3-VL-235B"]["levels"]
    assert qwen[-1]["concurrency_mean"] == pytest.approx(41.8, abs=0.1)
    assert all(level["underloaded"] for level in qwen)


def test_recommendations_for_qwen_match_the_seed(seed_summary):
    # Seed: low latency 1-10, balanced 50, high throughput 100+.
    qwen = seed_summary[0]["configs"]["Qwen3-VL-235B"]
    assert qwen["recommendations"] == {"low_latency": 10, "balanced": 50, "high_throughput": 100}


def test_summary_json_is_the_returned_summary(seed_summary):
    summary, out = seed_summary
    assert json.loads((out / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["runs"] == 4 and set(summary["configs"]) == set(SEED_TABLES)
