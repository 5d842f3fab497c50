"""llm-d's Benchmark Report both ways: ``vllm-stress analyse`` writes one per run and level (a load stage) beside its
report, schema version BR_VERSION (llm-d-benchmark's ``br_v0_2_1_json_schema.json``, loaded by its own
``load_benchmark_report`` in the tests), from the level's own figures (``levels.level_stats``); ``compare`` reads
reports (ours, or llm-d-benchmark's and inference-perf's) as a side, in any unit the schema allows
(docs/guides/disaggregated.md)."""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from vllm_stress.analysis.io.json_types import Json, to_json_types
from vllm_stress.analysis.io.load import AnalysisError, Run
from vllm_stress.analysis.io.store import StoredRun
from vllm_stress.analysis.levels import level_windows
from vllm_stress.analysis.measures import PERCENTILES, Level, classify, ended_in_windows, records
from vllm_stress.core.metrics import percentile
from vllm_stress.core.schema import REQUESTS_FILE

BR_VERSION = "0.2.1"
REPORTS_DIR = "benchmark_report"  # under the report's folder: <label>/run-<n>/users-<N>.json
TOOL = "vllm-stress"
LATENCIES = {  # Benchmark Report latency -> (request column / our level field stem, the units we write it in)
    "time_to_first_token": ("ttft", "s"),
    "time_per_output_token": ("tpot", "s/token"),
    "request_latency": ("e2e", "s"),
}
RATES = {  # Benchmark Report throughput -> (our level field, its units: the only ones the schema allows)
    "request_rate": ("requests_per_s", "queries/s"),
    "output_token_rate": ("output_tokens_per_s", "tokens/s"),
    "total_token_rate": ("total_tokens_per_s", "tokens/s"),
}
# Every latency unit the schema allows (a time: s or ms; a time per token: s/token or ms/token), in seconds
SECONDS = {"s": 1.0, "ms": 1e-3, "s/token": 1.0, "ms/token": 1e-3}
MORE_PERCENTILES = (25, 75, 95)  # the schema's Statistics has these too: of the same requests, by the same rule
NATIVE_KEYS = ("scenario", "target", "model", "user_class", "input_tokens", "output_tokens")  # run.json's
NO_VERDICT = "an llm-d Benchmark Report: no steady-state verdict"


def tool_version() -> str:
    try:
        return version(TOOL)
    except PackageNotFoundError:
        return "unknown"


def statistics(values: np.ndarray, units: str, level: Level | None = None, stem: str = "") -> dict[str, Json] | None:
    """A schema Statistics object of ``values`` (None without any); with a ``level``, its p50/p90/p99 are the level's
    own ``{stem}_p<q>_s`` fields, the rest of the same values by the same rule (vllm_stress.core.metrics.percentile)."""
    values = values[~np.isnan(values)]
    if not values.size:
        return None
    stats: dict[str, Json] = {"units": units, "mean": float(values.mean()), "min": float(values.min())}
    for q in PERCENTILES:
        stats[f"p{q}"] = float(level[f"{stem}_p{q}_s"]) if level is not None else percentile(values, q)
    stats |= {f"p{q}": percentile(values, q) for q in MORE_PERCENTILES}
    stats |= {"max": float(values.max()), "stddev": float(values.std(ddof=1)) if values.size > 1 else 0.0}
    return stats


def iso(timestamp: float) -> str:
    return datetime.fromtimestamp(timestamp, UTC).isoformat().replace("+00:00", "Z")


def level_report(run: Run, window: pd.Series, level: Level, measured: pd.DataFrame, stage: int) -> Json:
    """The Benchmark Report of one level: its figures (``level``, a level_stats row) and the distributions of its
    ``measured`` requests (those its percentiles are of)."""
    meta = run.meta
    start, end = float(window["start"]), float(window["end"])
    prompt = measured["prompt_tokens"].to_numpy(float)
    requests = {
        "total": int(level["requests"]),
        "failures": int(level["failures"]),
        "input_length": statistics(prompt, "count"),
        "output_length": statistics(measured["completion_tokens"].to_numpy(float), "count"),
    }
    latency = {
        name: statistics(measured[f"{stem}_s"].to_numpy(float), units, level, stem)
        for name, (stem, units) in LATENCIES.items()
    }
    throughput = {  # a rate the level left empty (no usage: no token rate) is left out
        name: {"units": units, "mean": float(level[field])}
        for name, (field, units) in RATES.items()
        if not math.isnan(level[field])
    }
    mean_prompt = float(np.nanmean(prompt)) if np.isfinite(prompt).any() else 0.0
    load = {
        "metadata": {"description": f"{TOOL} closed loop at {int(window['users'])} users, steady-state window"},
        "standardized": {
            "tool": TOOL,
            "tool_version": tool_version(),
            "source": "random" if meta.get("input_tokens") else "unknown",  # synthetic prompts of a target length
            "stage": stage,
            "input_seq_len": {"distribution": "other", "value": mean_prompt},
            "concurrency": int(window["users"]),
        },
        "native": {"args": {key: meta[key] for key in NATIVE_KEYS if meta.get(key) is not None}},
    }
    report = {
        "version": BR_VERSION,
        "run": {
            "uid": str(uuid.uuid4()),
            "eid": str(run.path),
            "time": {"start": iso(start), "end": iso(end), "duration": f"PT{end - start:.3f}S"},
            "description": f"{TOOL} run {run.path}, level {int(window['users'])} users",
            "keywords": [TOOL],
        },
        "scenario": {"load": load},
        "results": {
            "request_performance": {
                "aggregate": {"requests": requests, "latency": latency, "throughput": throughput},
            }
        },
    }
    return to_json_types(report)


def run_reports(run: Run, levels: pd.DataFrame) -> dict[int, Json]:
    """Each level's Benchmark Report by its users, from the run's ``level_stats`` rows (``levels``) in the level
    windows (``level_windows``) they were computed in."""
    windows, _ = level_windows(run)
    ended = ended_in_windows(classify(run.requests), windows)
    measured = ended[ended["measured"]]
    by_users = {int(level["users"]): level for level in records(levels)}
    return {
        int(window["users"]): level_report(
            run, window, by_users[int(window["users"])], measured[measured["users"] == window["users"]], stage
        )
        for stage, (_, window) in enumerate(windows.iterrows())
    }


def safe_name(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "config"


def write_reports(analysed: Sequence[StoredRun], out: Path) -> list[Path]:
    """Every analysed run's level reports under ``out``/REPORTS_DIR (run-<n>: its place among its config's runs);
    the files written."""
    written = []
    runs_of: dict[str, int] = {}
    for label, run, levels in analysed:
        runs_of[label] = index = runs_of.get(label, 0) + 1
        folder = out / REPORTS_DIR / safe_name(label) / f"run-{index}"
        folder.mkdir(parents=True, exist_ok=True)
        for users, report in run_reports(run, levels).items():
            path = folder / f"users-{users}.json"
            path.write_text(json.dumps(report, indent=1) + "\n")
            written.append(path)
    return written


def is_report(document: object) -> bool:
    return isinstance(document, dict) and {"version", "run", "results"} <= document.keys()


def report_files(source: str | Path) -> list[Path]:
    """The Benchmark Report files a source names: itself, or the JSON files under a folder that are reports ([] for
    a run folder)."""
    path = Path(source)
    if (path / REQUESTS_FILE).is_file():
        return []
    candidates = [path] if path.is_file() else sorted(path.rglob("*.json")) if path.is_dir() else []
    found = []
    for candidate in candidates:
        try:
            document = json.loads(candidate.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        found += [candidate] if is_report(document) else []
    return found


def level_row(path: Path, report: dict[str, Any]) -> Level:
    """Our level fields from one Benchmark Report (NaN where it says nothing)."""
    load = ((report.get("scenario") or {}).get("load") or {}).get("standardized") or {}
    users = load.get("concurrency")
    if not isinstance(users, int | float) or users < 1 or users != int(users):
        raise AnalysisError(f"{path}: a Benchmark Report without an integer concurrency has no level to compare")
    aggregate = ((report["results"].get("request_performance") or {}).get("aggregate")) or {}
    row: Level = {"users": int(users), "partial": False, "steady": False, "steady_reason": NO_VERDICT}
    throughput = aggregate.get("throughput") or {}
    row |= {field: mean_of(throughput.get(name)) for name, (field, _) in RATES.items()}
    requests = aggregate.get("requests") or {}
    row |= {"requests": float(requests.get("total", math.nan)), "failures": float(requests.get("failures") or 0)}
    latency = aggregate.get("latency") or {}
    for name, (stem, _) in LATENCIES.items():
        stats = latency.get(name) or {}
        scale = SECONDS.get(stats.get("units", ""), math.nan)
        for q in PERCENTILES:
            value = stats.get(f"p{q}")
            row[f"{stem}_p{q}_s"] = float(value) * scale if isinstance(value, int | float) else math.nan
    return row


def mean_of(stats: object) -> float:
    return float(stats["mean"]) if isinstance(stats, dict) and isinstance(stats.get("mean"), int | float) else math.nan


def read_reports(paths: Sequence[Path]) -> list[pd.DataFrame]:
    """One frame per report file's run: reports sharing a run uid's experiment (eid) and folder form one run."""
    by_run: dict[tuple[str, str], list[Level]] = {}
    for path in paths:
        report = json.loads(path.read_text())
        key = (str(path.parent), str((report.get("run") or {}).get("eid") or ""))
        by_run.setdefault(key, []).append(level_row(path, report))
    return [pd.DataFrame(rows).sort_values("users").reset_index(drop=True) for rows in by_run.values()]
