"""The summary: the data that summary.json, the plots and the reports are made from, its shapes as types
(docs/concepts/analysis.md, "summary.json")."""

from __future__ import annotations

import math
from collections import Counter
from typing import Any, NotRequired, TypedDict, cast

import pandas as pd

from vllm_stress.analysis import stats
from vllm_stress.analysis.capacity import KvCeiling, kv_ceiling
from vllm_stress.analysis.features import ConfigInput, RunLevels, features
from vllm_stress.analysis.io.json_types import to_json_types
from vllm_stress.analysis.io.load import AnalysisError, RunMeta
from vllm_stress.analysis.levels import COST_FIELDS, level_stats
from vllm_stress.analysis.measures import Level, records
from vllm_stress.analysis.replicas import REPLICA_LEVEL_COLUMNS
from vllm_stress.core import bound
from vllm_stress.core.formats import FORMAT_VERSION

# The peak level: users, output/total tok/s, req/s and p99 e2e (their _std and _ci95 with repeats), per GPU with --gpus,
# its costs with --gpu-hour-price
Peak = dict[str, float | None]
Scaling = TypedDict("Scaling", {"from": int, "to": int, "factor": float | None})


class RunInfo(TypedDict):
    """What a config's summary keeps of each of its runs besides its levels."""

    dir: str
    partial: bool
    windows: str  # how the windows were found
    meta: RunMeta
    errors: dict[str, int]  # failed requests by class
    aborted: int  # streams cut because the run stopped its users
    locust_exceptions: int
    locust_failures: dict[str, int]
    format_version: int  # the run folder's (vllm_stress.core.formats)
    not_computed: list[str]  # what its format lacked: "no schedule lag: written before 2026-11-23" ...
    notes: list[str]  # what was left out of its input, and why (a killed writer's half-written last line)
    unjoined_spans: int | None  # server spans that joined no row (other clients'), None without server_spans.csv


class EarlierFormat(TypedDict):
    """A run written in an earlier format than today's, and what the analysis could not compute for it."""

    run: str
    format_version: int
    not_computed: list[str]


class Capacity(TypedDict):
    """From the steady levels only: all None when no level was steady (the scaling factor when both of its levels
    were)."""

    peak: Peak | None
    saturation_users: int | None
    knee_users: int | None
    scaling: Scaling
    recommendations: dict[str, int] | None  # use case -> users


class ConfigSummary(Capacity):
    """A config: a label grouping repeat runs of one server, model and scenario."""

    label: str
    runs: int
    run_dirs: list[str]
    partial: bool
    partial_runs: list[str]
    windows: list[str]
    model: str | None  # run.json's, as its other keys below
    scenario: str | None
    input_tokens: int | None
    output_tokens: int | None
    target: str | None
    simulated: str | None  # the embedded simulator's arguments when it was the server (run.json server_launch)
    twin: dict[str, str] | None  # {"source", "error"} when the server was a calibrated twin (run.json server_twin)
    gpus: int | None
    levels: list[Level]
    throughput_field: str  # output_tokens_per_s, or requests_per_s without token counts
    unsteady_levels: list[int]
    errors: dict[str, int]
    aborted: int
    locust_failures: dict[str, int]
    locust_exceptions: int
    replicas: list[dict[str, Any]]  # per level and replica behind a router (replicas.REPLICA_LEVEL_COLUMNS)
    earlier_formats: list[EarlierFormat]  # its runs written by an earlier release
    input_notes: list[str]  # "<run folder>: <note>" for what was left out of its runs' input
    gpu_hour_price: NotRequired[float]  # $ per GPU-hour (--gpu-hour-price), when given
    kv_cache: KvCeiling | None  # None when no run's run.json names the server's KV cache
    unjoined_spans: int | None  # server spans of its runs that joined no row (other clients'), None: no span file
    # and each capability's keys (vllm_stress.analysis.features: traffic, canaries, tasks, classes, adapters ...)


class Unaccounted(TypedDict):
    """A run whose server finished requests that have no row."""

    run: str
    server_requests: int
    rows: int
    unaccounted_requests: int
    lost_with: list[str]  # the workers lost mid-run


class Summary(TypedDict):
    """The whole summary. With a single config, that config's keys are also at the top level (the contract other
    tools read)."""

    format_version: int  # vllm_stress.core.formats.FORMAT_VERSION of the suite that wrote it
    runs: int
    configs: dict[str, ConfigSummary]
    slo: dict[str, float] | None
    lost_workers: list[dict[str, Any]]  # run.json's lost_workers entries, each with its "run"
    unaccounted: list[Unaccounted]
    store_ids: NotRequired[list[int]]


def summarise_config(
    label: str,
    runs: list[RunLevels],
    run_info: list[RunInfo],
    gpus: int | None,
    scaling: tuple[int, int] | None,
    replicas: pd.DataFrame,
    gpu_hour_price: float | None = None,
    window_s: float | None = None,
) -> ConfigSummary:
    """The config summary from its runs' level rows, per-run info and replicas' rows (replicas.replica_levels of each
    run, averaged over the repeats), with each capability's part (vllm_stress.analysis.features); with
    ``gpu_hour_price`` (and ``gpus``) what a million tokens cost at each level and at the peak; ``window_s``: the
    window of the per-window tables of open loops (None: their default)."""
    per_run = pd.concat([run.stats.assign(run=index) for index, run in enumerate(runs)])
    levels = stats.aggregate_repeats(per_run).sort_values("users").reset_index(drop=True)
    levels["output_tokens_per_s_per_user"] = 1 / levels["tpot_p50_s"]
    output = levels["output_tokens_per_s"].astype(float)
    levels["gpu_joules_per_output_token"] = levels["gpu_power_w"].astype(float) / output.where(output > 0)
    if gpus:
        levels["output_tokens_per_s_per_gpu"] = levels["output_tokens_per_s"] / gpus
    if gpu_hour_price is not None and gpus:
        levels = levels.join(stats.costs(levels, gpu_hour_price, gpus))
    levels["underloaded"] = stats.underloaded(levels)
    cap = bound.launch_max_num_seqs(run_info[0]["meta"])  # the level's bound tells a full batch from compute
    levels["bound"] = stats.bounds(levels.assign(max_num_seqs=cap or math.nan))
    replicas = replicas.groupby(["users", "replica"], as_index=False)[
        [column for column in REPLICA_LEVEL_COLUMNS if column not in ("users", "replica")]
    ].mean()
    decided = [bounds for feature in features() if (bounds := feature.bounds(levels)) is not None]
    levels["bound"] = decided[0] if decided else stats.router_bounds(levels, replicas)
    low, high = scaling or (int(levels["users"].min()), int(levels["users"].max()))
    for level in (low, high):
        if level not in set(levels["users"]):
            raise AnalysisError(
                f"--scaling: level {level} not measured for {label} (levels {levels['users'].tolist()})"
            )
    meta = run_info[0]["meta"]
    config = {
        "label": label,
        "runs": len(run_info),
        "run_dirs": [info["dir"] for info in run_info],
        "partial": any(info["partial"] for info in run_info),
        "partial_runs": [info["dir"] for info in run_info if info["partial"]],
        "windows": sorted({info["windows"] for info in run_info}),
        "model": meta.get("model"),
        "scenario": meta.get("scenario"),
        "input_tokens": meta.get("input_tokens"),
        "output_tokens": meta.get("output_tokens"),
        "target": meta.get("target"),
        "simulated": simulated(meta),
        "twin": meta.get("server_twin"),
        "gpus": gpus,
        "levels": records(levels),
        "throughput_field": stats.throughput_field(levels),
        "unsteady_levels": levels.loc[~levels["steady"], "users"].tolist(),
        **(verdicts := capacity(levels, gpus, low, high)),
        "kv_cache": kv_ceiling([info["meta"] for info in run_info], levels, verdicts["saturation_users"]),
        "errors": dict(sum((Counter(info["errors"]) for info in run_info), Counter[str]())),
        "aborted": sum(info["aborted"] for info in run_info),
        "locust_failures": dict(sum((Counter(info["locust_failures"]) for info in run_info), Counter[str]())),
        "locust_exceptions": sum(info["locust_exceptions"] for info in run_info),
        "replicas": records(replicas),
        "earlier_formats": [
            {"run": info["dir"], "format_version": info["format_version"], "not_computed": info["not_computed"]}
            for info in run_info
            if info["format_version"] < FORMAT_VERSION
        ],
        "input_notes": [f"{info['dir']}: {note}" for info in run_info for note in info["notes"]],
        "unjoined_spans": unjoined_spans(run_info),
    }
    features_input = ConfigInput(label, runs, gpus, gpu_hour_price, level_stats, window_s)
    for feature in features():
        config.update(feature.summarise(features_input))
    if gpu_hour_price is not None:
        config["gpu_hour_price"] = gpu_hour_price
    return cast(ConfigSummary, to_json_types(config))  # its JSON form: numpy scalars unwrapped, NaN as None


def unjoined_spans(run_info: list[RunInfo]) -> int | None:
    """The server spans of the runs that joined no row, None when no run has server_spans.csv."""
    counts = [info["unjoined_spans"] for info in run_info if info["unjoined_spans"] is not None]
    return sum(counts) if counts else None


def simulated(meta: RunMeta) -> str | None:
    """The embedded simulator's arguments (``--profile … --max-num-seqs …``) when the scenario runner started it
    as the run's server, else None."""
    launch = meta.get("server_launch") or {}
    return " ".join(launch["command"][3:]) if launch.get("kind") == "simulator" else None


def capacity(levels: pd.DataFrame, gpus: int | None, low: int, high: int) -> Capacity:
    """Peak, saturation point, knee, scaling and recommendations, from the steady levels only (all None when no
    level is steady; the scaling factor when both its levels are steady)."""
    field = stats.throughput_field(levels)
    steady = stats.steady_levels(levels)
    if steady.empty:
        return {
            "peak": None,
            "saturation_users": None,
            "knee_users": None,
            "recommendations": None,
            "scaling": {"from": low, "to": high, "factor": None},
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


def peak_summary(peak: pd.Series, gpus: int | None) -> Peak:
    """The peak level's throughput (output and total), p99 e2e, CIs when present, per-GPU figures and, when priced,
    its costs (COST_FIELDS)."""
    fields = ["output_tokens_per_s", "total_tokens_per_s", "requests_per_s", "e2e_p99_s", *COST_FIELDS.values()]
    summary: Peak = {"users": int(peak["users"])}
    for name in fields:
        summary.update({key: float(peak[key]) for key in (name, f"{name}_std", f"{name}_ci95") if key in peak})
    if gpus:
        summary["output_tokens_per_s_per_gpu"] = float(peak["output_tokens_per_s"]) / gpus
        summary["total_tokens_per_s_per_gpu"] = float(peak["total_tokens_per_s"]) / gpus
    return summary


def build_summary(
    configs: dict[str, ConfigSummary],
    slo: dict[str, float] | None,
    lost_workers: list[dict[str, Any]],
    unaccounted: list[Unaccounted],
) -> Summary:
    """The whole summary; a single config's keys are repeated at the top level."""
    summary: Summary = {
        "format_version": FORMAT_VERSION,
        "runs": sum(c["runs"] for c in configs.values()),
        "configs": configs,
        "slo": slo or None,
        "lost_workers": lost_workers,
        "unaccounted": unaccounted,
    }
    if len(configs) == 1:
        return cast(Summary, {**next(iter(configs.values())), **summary})  # a Summary with the config's keys too
    return summary
