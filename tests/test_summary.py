"""vllm_stress.analysis.summary: the summary's shape — one config's keys at the top level too, the peak's per-GPU
figures (the figures themselves, from synthetic runs: test_analysis_cli.py and the
test_analysis_* files)."""

import numpy as np
import pandas as pd

from vllm_stress.analysis.summary import build_summary, capacity, peak_summary
from vllm_stress.core.formats import FORMAT_VERSION


def test_one_configs_keys_are_also_at_the_top():
    one = {"a": {"runs": 2, "label": "a", "peak": None}}
    lost = [{"worker": "w1", "requests": 3}]
    assert build_summary(one, {"ttft": 2.0}, lost, []) == {
        "format_version": FORMAT_VERSION,
        "runs": 2,
        "label": "a",
        "peak": None,
        "configs": one,
        "slo": {"ttft": 2.0},
        "lost_workers": lost,
        "unaccounted": [],
    }
    two = {"a": {"runs": 2}, "b": {"runs": 3}}
    assert build_summary(two, {}, [], []) == {
        "format_version": FORMAT_VERSION,
        "runs": 5,
        "configs": two,
        "slo": None,
        "lost_workers": [],
        "unaccounted": [],
    }


def test_the_peak_per_gpu_and_with_its_spread_when_repeated():
    peak = pd.Series(
        {
            "users": np.int64(64),
            "output_tokens_per_s": 1000.0,
            "output_tokens_per_s_ci95": 40.0,
            "total_tokens_per_s": 5000.0,
            "requests_per_s": 8.0,
            "e2e_p99_s": 3.5,
            "ttft_p50_s": 0.2,
        }
    )
    assert peak_summary(peak, gpus=4) == {
        "users": 64,
        "output_tokens_per_s": 1000.0,
        "output_tokens_per_s_ci95": 40.0,
        "total_tokens_per_s": 5000.0,
        "requests_per_s": 8.0,
        "e2e_p99_s": 3.5,
        "output_tokens_per_s_per_gpu": 250.0,
        "total_tokens_per_s_per_gpu": 1250.0,
    }
    assert "output_tokens_per_s_per_gpu" not in peak_summary(peak, gpus=None)


def test_no_steady_level_no_capacity_figures():
    levels = pd.DataFrame(
        {
            "users": [5, 10],
            "steady": [False, False],
            "output_tokens_per_s": [100.0, 150.0],
            "requests_per_s": [1.0, 1.5],
        }
    )
    assert capacity(levels, None, 5, 10) == {
        "peak": None,
        "saturation_users": None,
        "knee_users": None,
        "recommendations": None,
        "scaling": {"from": 5, "to": 10, "factor": None},
    }
