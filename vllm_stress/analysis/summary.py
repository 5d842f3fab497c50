"""The summary: the data shape that summary.json, the plots and the reports are made from.

Per config (a label grouping repeat runs of one server/model/scenario)::

    {"label", "runs", "run_dirs", "partial", "partial_runs", "windows", "model", "scenario", "gpus",
     "levels": [{"users", "requests", "failures", "success_rate", "output_tokens_per_s", "total_tokens_per_s",
                 "requests_per_s", "ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "e2e_p50_s", "e2e_p99_s", ...,
                 "steady", "steady_reason", "aborted", "off_target", ...,
                 "runs", "partial", "underloaded", and with repeats "<field>_std", "<field>_ci95", "unstable"}],
     "throughput_field" (output_tokens_per_s, or requests_per_s without token counts), "unsteady_levels",
     "peak": {"users", "output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "e2e_p99_s", "*_per_gpu"},
     "saturation_users", "knee_users", "scaling": {"from", "to", "factor"}, "recommendations",
     (peak to recommendations come from steady levels only: None when no level was steady)
     "errors": {error class: failed requests}, "aborted": streams cut because the run stopped its users, "locust_failures": {error: occurrences}, "locust_exceptions",
     "traffic": [per run with sessions or an open loop: {"run", "turns", "sessions", "window_s", "windows"}]
     (vllm_stress.analysis.traffic: per-turn, per-session and per-window tables)}

The whole summary is ``{"runs", "configs": {label: config}, "slo"}``; with a single config that config's keys are
also at the top level (the contract other tools read).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pandas as pd

from vllm_stress.analysis import stats
from vllm_stress.analysis.load import AnalysisError

META_KEYS = ("model", "scenario", "input_tokens", "output_tokens", "target")


def summarise_config(
    label: str,
    per_run: pd.DataFrame,
    run_info: list[dict],
    gpus: int | None,
    scaling: tuple[int, int] | None,
) -> dict:
    """The config summary from its per-run level rows (column ``run``) and per-run info (dir, partial, windows,
    meta, errors, locust_failures, locust_exceptions)."""
    levels = stats.aggregate_repeats(per_run).sort_values("users").reset_index(drop=True)
    levels["underloaded"] = stats.underloaded(levels)
    levels["bound"] = stats.bounds(levels)
    low, high = scaling or (int(levels["users"].min()), int(levels["users"].max()))
    for level in (low, high):
        if level not in set(levels["users"]):
            raise AnalysisError(
                f"--scaling: level {level} not measured for {label} (levels {levels['users'].tolist()})"
            )
    config = {
        "label": label,
        "runs": len(run_info),
        "run_dirs": [info["dir"] for info in run_info],
        "partial": any(info["partial"] for info in run_info),
        "partial_runs": [info["dir"] for info in run_info if info["partial"]],
        "windows": sorted({info["windows"] for info in run_info}),
        **{key: run_info[0]["meta"].get(key) for key in META_KEYS},
        "gpus": gpus,
        "levels": levels.to_dict("records"),
        "throughput_field": stats.throughput_field(levels),
        "unsteady_levels": levels.loc[~levels["steady"], "users"].tolist(),
        **capacity(levels, gpus, low, high),
        "errors": dict(sum((Counter(info["errors"]) for info in run_info), Counter())),
        "aborted": sum(info["aborted"] for info in run_info),
        "locust_failures": dict(sum((Counter(info["locust_failures"]) for info in run_info), Counter())),
        "locust_exceptions": sum(info["locust_exceptions"] for info in run_info),
    }
    return to_json_types(config)


def capacity(levels: pd.DataFrame, gpus: int | None, low: int, high: int) -> dict:
    """Peak, saturation point, knee, scaling and recommendations, from the steady levels only (all None when no
    level is steady; the scaling factor when both its levels are steady)."""
    field = stats.throughput_field(levels)
    steady = stats.steady_levels(levels)
    if steady.empty:
        return dict.fromkeys(("peak", "saturation_users", "knee_users", "recommendations"), None) | {
            "scaling": {"from": low, "to": high, "factor": None}
        }
    both = {low, high} <= set(steady["users"])
    return {
        "peak": peak_summary(stats.peak_level(steady, field), gpus),
        "saturation_users": stats.saturation_users(steady, field),
        "knee_users": stats.knee_users(steady, field),
        "scaling": {
            "from": low,
            "to": high,
            "factor": stats.scaling_factor(steady, low, high, field) if both else None,
        },
        "recommendations": stats.recommendations(steady, field),
    }


def peak_summary(peak: pd.Series, gpus: int | None) -> dict:
    """The peak level's throughput (output and total), p99 e2e, CIs when present and per-GPU figures."""
    fields = ["output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "e2e_p99_s"]
    summary = {"users": int(peak["users"])}
    for name in fields:
        summary.update({key: peak[key] for key in (name, f"{name}_std", f"{name}_ci95") if key in peak})
    if gpus:
        summary["output_tokens_per_s_per_gpu"] = peak["output_tokens_per_s"] / gpus
        summary["total_tokens_per_s_per_gpu"] = peak["total_tokens_per_s"] / gpus
    return summary


def build_summary(configs: dict[str, dict], slo: dict[str, float] | None) -> dict:
    """The whole summary; a single config's keys are repeated at the top level."""
    summary = {"runs": sum(c["runs"] for c in configs.values()), "configs": configs, "slo": slo or None}
    if len(configs) == 1:
        summary = {**next(iter(configs.values())), **summary}
    return summary


def to_json_types(value):
    """Plain Python types for json: numpy scalars unwrapped, NaN and infinities as None."""
    if isinstance(value, dict):
        return {str(k): to_json_types(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json_types(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value
