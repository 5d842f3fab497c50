"""Orchestration: run folders -> per-level statistics -> summary -> plots, report.md, report.html, summary.json.

``analyse`` is the entry point for the CLI (``python -m analysis``) and for the scenario runner.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from vllm_stress.analysis import store
from vllm_stress.analysis.document import TITLE, build_report
from vllm_stress.analysis.levels import LATENCY_METRICS, classify, error_counts, level_stats, level_windows, timeline
from vllm_stress.analysis.load import AnalysisError, Run, load_run
from vllm_stress.analysis.plots import write_plots
from vllm_stress.analysis.render import Bullets, Heading, Paragraph, to_html, to_markdown
from vllm_stress.analysis.summary import build_summary, summarise_config
from vllm_stress.analysis.traffic import DEFAULT_WINDOW_S, traffic_blocks, traffic_tables
from vllm_stress.core.numbers import count, cpu
from vllm_stress.core.schema import CLIENT_CPU_LIMIT_PERCENT, REPORT_HTML, REPORT_MD, SUMMARY_JSON
from vllm_stress.core.sizing import worker_processes

ANY_LABEL = "*"  # key of a gpus mapping that applies to every label not named


def analyse(
    dirs: Sequence[str | Path],
    out: str | Path,
    *,
    labels: str | Mapping[str, str] | None = None,
    gpus: int | Mapping[str, int] | None = None,
    slo: Mapping[str, float] | None = None,
    scaling: tuple[int, int] | None = None,
    db: str | Path | None = None,
    window_s: float = DEFAULT_WINDOW_S,
) -> dict:
    """Analyse run folders and write the report into ``out``; returns the summary (the summary.json content).

    ``labels``: one label for every dir, or {dir: label}; dirs without one are labelled from run.json (model and
    scenario) or by folder name. Dirs sharing a label are repeats of one config. ``gpus``: GPU count for every
    config, or {label: count} ("*" for the rest). ``slo``: limits in seconds for "ttft", "tpot", "e2e" (goodput). ``scaling``: the two
    levels of the scaling factor (default: smallest and largest). ``db``: a results store (``vllm_stress.analysis.store``; default
    $VLLM_STRESS_DB) to append the runs to, their ids in the returned ``store_ids``. ``window_s``: the window of the
    per-window tables of open-loop runs and trace replays (``vllm_stress.analysis.traffic``). Raises AnalysisError on bad input.
    """
    if not dirs:
        raise AnalysisError("no run folder given")
    unknown = sorted(set(slo or {}) - set(LATENCY_METRICS))
    if unknown:
        raise AnalysisError(f"--slo: unknown metric(s) {', '.join(unknown)} (use {', '.join(LATENCY_METRICS)})")
    configs, timelines, lost_workers, unaccounted, analysed = {}, {}, [], [], []
    for label, runs in group_runs(dirs, labels).items():
        per_run, run_info = [], []
        for index, run in enumerate(runs):
            lost_workers += [{"run": str(run.path), **lost} for lost in run.meta.get("lost_workers") or []]
            unaccounted += unaccounted_requests(run)
            windows, partial = level_windows(run)
            if windows.empty:
                raise AnalysisError(f"{run.path}: no level reached a steady-state window")
            stats = level_stats(run, windows, dict(slo or {}))
            per_run.append(stats.assign(run=index))
            analysed.append((label, run, stats))
            run_info.append(describe_run(run, partial))
            windows = windows.assign(steady=stats["steady"].to_numpy())
            timelines.setdefault(label, []).append((str(run.path), timeline(run.requests), windows))
        configs[label] = summarise_config(label, pd.concat(per_run), run_info, gpus_for(gpus, label), scaling)
        configs[label]["traffic"] = [tables for run in runs if (tables := traffic_tables(run, window_s))]
    summary = build_summary(configs, dict(slo) if slo else None)
    summary["lost_workers"] = lost_workers
    summary["unaccounted"] = unaccounted
    write_outputs(summary, timelines, Path(out))
    db = db or store.default_db()
    if db:
        summary["store_ids"] = store.record(db, summary, analysed)
    return summary


def run_levels(path: str | Path) -> pd.DataFrame:
    """One row per level of one run folder (``level_stats``), for tools that compare or export single runs."""
    run = load_run(path)
    windows, _ = level_windows(run)
    if windows.empty:
        raise AnalysisError(f"{run.path}: no level reached a steady-state window")
    return level_stats(run, windows)


def group_runs(dirs: Sequence[str | Path], labels: str | Mapping[str, str] | None) -> dict[str, list[Run]]:
    """Load every dir and group the runs by label, in the order the labels first appear."""
    by_path = {} if labels is None or isinstance(labels, str) else {Path(d).resolve(): n for d, n in labels.items()}
    groups: dict[str, list[Run]] = {}
    for directory in dirs:
        run = load_run(directory)
        label = labels if isinstance(labels, str) else by_path.get(Path(directory).resolve()) or default_label(run)
        groups.setdefault(label, []).append(run)
    return groups


def gpus_for(gpus: int | Mapping[str, int] | None, label: str) -> int | None:
    """The GPU count of one config."""
    if isinstance(gpus, Mapping):
        return gpus.get(label, gpus.get(ANY_LABEL))
    return gpus


def default_label(run: Run) -> str:
    """'model · scenario' from run.json, or the folder name."""
    parts = [str(run.meta[key]) for key in ("model", "scenario") if run.meta.get(key)]
    return " · ".join(parts) or run.path.name


def describe_run(run: Run, partial: bool) -> dict:
    """What the summary keeps about one run besides its levels."""
    exceptions = run.tables.get("locust_exceptions")
    failures = run.tables.get("locust_failures")
    return {
        "dir": str(run.path),
        "partial": partial,
        "windows": "levels.csv hold windows" if "levels" in run.tables else "derived from request rows",
        "meta": run.meta,
        "errors": error_counts(run.requests),
        "aborted": int(classify(run.requests)["aborted"].sum()),
        "locust_exceptions": 0 if exceptions is None else int(exceptions["Count"].sum()),
        "locust_failures": {} if failures is None else failures.groupby("Error")["Occurrences"].sum().to_dict(),
    }


def write_outputs(summary: dict, timelines: dict[str, list], out: Path) -> None:
    """Plots, report.md, report.html and summary.json into ``out`` (created if needed)."""
    if out.exists() and not out.is_dir():
        raise AnalysisError(f"{out}: output path exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    plots = write_plots(summary, timelines, out)
    blocks = build_report(summary, plots)
    plots_at = next((i for i, block in enumerate(blocks) if block == Heading("Plots")), len(blocks))
    blocks[plots_at:plots_at] = [block for config in summary["configs"].values() for block in traffic_blocks(config)]
    if summary["lost_workers"] or summary["unaccounted"]:  # after the title and the overview
        blocks[2:2] = lost_worker_blocks(summary["lost_workers"], summary["unaccounted"])
    blocks[2:2] = client_limit_blocks(summary["configs"])
    (out / REPORT_MD).write_text(to_markdown(blocks))
    (out / REPORT_HTML).write_text(to_html(blocks, TITLE))
    (out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")


LOST_WORKERS_NOTE = (
    "These Locust workers stopped answering the master mid-run (run.json lost_workers). The requests they had in "
    "flight, and the rows they had not yet reported (a few seconds before their last heartbeat), are missing: the "
    "levels around that time count fewer requests and tokens than the server served. The unaccounted count is the "
    "server's own count of requests finished during the run (vllm:request_success_total) minus the rows, assuming "
    "the run was the server's only client."
)


CLIENT_LIMIT_NOTE = (
    "At these levels a load generator (the master or a worker process) reached Locust's CPU warning limit: the "
    "timings may include the client's own delay. The worker processes the level's output tokens/s needs are planned "
    "as `python -m scenarios plan` does (CPU per streamed token from benchmarks/client.md, at most half a core each)."
)


def client_limit_blocks(configs: dict) -> list:
    """The report's warning about levels where a load generator reached Locust's CPU limit, with the worker
    processes that level needed; [] when none did."""
    items = []
    for label, config in configs.items():
        for level in config["levels"]:
            busiest = level.get("client_cpu_max_percent")
            if busiest is not None and busiest >= CLIENT_CPU_LIMIT_PERCENT:
                needed = worker_processes(level["output_tokens_per_s"])
                items.append(
                    f"{label}, {level['users']} users: a load generator at {cpu(busiest)} CPU; "
                    f"{count(level['output_tokens_per_s'])} output tok/s need {needed} worker process"
                    f"{'es' if needed > 1 else ''}"
                )
    return [Heading("Client CPU limit reached"), Paragraph(CLIENT_LIMIT_NOTE), Bullets(items)] if items else []


def unaccounted_requests(run: Run) -> list[dict]:
    """[{run, server_requests, rows, unaccounted_requests, lost_with}] when the server finished requests of this run
    that have no row (run.json unaccounted_requests, from the server's own counter), else []."""
    missing = run.meta.get("unaccounted_requests")
    if not missing:
        return []
    return [
        {
            "run": str(run.path),
            "server_requests": run.meta["server_requests"],
            "rows": len(run.requests),
            "unaccounted_requests": missing,
            "lost_with": [lost["worker"] for lost in run.meta["lost_workers"]],
        }
    ]


def lost_worker_blocks(lost_workers: list[dict], unaccounted: list[dict]) -> list:
    """The report's section on workers lost mid-run and on requests the server served that have no row."""
    items = [
        f"{lost['run']}: worker {lost['worker']}, last heartbeat {utc(lost['last_seen'])}, "
        f"{lost.get('rows', '?')} rows received from it"
        for lost in lost_workers
    ]
    items += [
        f"{run['run']}: {run['unaccounted_requests']} requests unaccounted: the server finished "
        f"{run['server_requests']}, requests.csv holds {run['rows']}; lost with worker(s) "
        f"{', '.join(run['lost_with']) or '(none lost: rows missing)'}"
        for run in unaccounted
    ]
    return [Heading("Lost workers and unaccounted requests"), Paragraph(LOST_WORKERS_NOTE), Bullets(items)]


def utc(timestamp: float | None) -> str:
    return "never" if timestamp is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))
