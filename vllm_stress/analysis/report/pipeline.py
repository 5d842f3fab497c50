"""Orchestration: run folders -> per-level statistics -> summary -> plots, report.md, report.html, summary.json.
``analyse`` is the entry point for the CLI (``python -m analysis``) and for the scenario runner."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

import pandas as pd

from vllm_stress.analysis.features import RunLevels, features
from vllm_stress.analysis.features.class_levels import only_class
from vllm_stress.analysis.figures import figures_wanted
from vllm_stress.analysis.figures.pareto import PARETO_PLOT, pareto_points, plot_pareto
from vllm_stress.analysis.figures.plots import Timeline, write_plots
from vllm_stress.analysis.io import llmd, store
from vllm_stress.analysis.io.load import AnalysisError, Run, load_run
from vllm_stress.analysis.io.store import StoredRun
from vllm_stress.analysis.levels import error_counts, level_stats, level_windows, timeline
from vllm_stress.analysis.measures import LATENCY_METRICS, classify
from vllm_stress.analysis.replicas import replica_levels
from vllm_stress.analysis.report.document import TITLE, build_report
from vllm_stress.analysis.report.render import to_html, to_markdown
from vllm_stress.analysis.summary import ConfigSummary, RunInfo, Summary, Unaccounted, build_summary, summarise_config
from vllm_stress.core.formats import not_computed
from vllm_stress.core.schema import REPORT_HTML, REPORT_MD, SUMMARY_JSON

ANY_LABEL = "*"  # key of a gpus or price mapping that applies to every label not named
Number = TypeVar("Number", int, float)


def analyse(
    dirs: Sequence[str | Path],
    out: str | Path,
    *,
    labels: str | Mapping[str, str] | None = None,
    gpus: int | Mapping[str, int] | None = None,
    slo: Mapping[str, float] | None = None,
    scaling: tuple[int, int] | None = None,
    db: str | Path | None = None,
    window_s: float | None = None,
    gpu_hour_price: float | Mapping[str, float] | None = None,
    canaries_in_figures: bool | None = None,
    figures: bool | None = None,
) -> Summary:
    """Analyse run folders and write the report into ``out``; returns the summary (the summary.json content).

    ``labels``: one label for every dir, or {dir: label}; dirs without one are labelled from run.json (model and
    scenario) or by folder name. Dirs sharing a label are repeats of one config. ``gpus``: GPU count for every
    config, or {label: count} ("*" for the rest). ``slo``: limits in seconds for "ttft", "tpot", "e2e" (goodput).
    ``scaling``: the two levels of the scaling factor (default: smallest and largest). ``db``: a results store
    (``vllm_stress.analysis.io.store``; default $VLLM_STRESS_DB) to append the runs to, their ids in the returned
    ``store_ids``. ``window_s``: the window of the per-window tables of open-loop runs and trace replays (None: their
    default, ``vllm_stress.analysis.features.traces``). ``gpu_hour_price``: $ per GPU-hour for every config, or
    {label: price} ("*" for the rest), for the cost per million tokens (needs the config's GPUs).
    ``canaries_in_figures``: True counts the correctness canaries' requests in every figure (None: as each run.json
    says; they are kept apart unless it says otherwise). ``figures``: False writes the report without its PNG figures
    (None: as $VLLM_STRESS_FIGURES says, drawn unless it is "0"). Raises AnalysisError on bad input.
    """
    if not dirs:
        raise AnalysisError("no run folder given")
    unknown = sorted(set(slo or {}) - set(LATENCY_METRICS))
    if unknown:
        raise AnalysisError(f"--slo: unknown metric(s) {', '.join(unknown)} (use {', '.join(LATENCY_METRICS)})")
    groups = group_runs(dirs, labels, canaries_in_figures)
    configs, timelines, analysed = {}, {}, []
    for label, runs in groups.items():
        price = for_label(gpu_hour_price, label)
        if price is not None and not for_label(gpus, label):
            raise AnalysisError(f"--gpu-hour-price: give the GPUs of {label} too (--gpus): the price is per GPU-hour")
        configs[label], timelines[label], stored = summarise_runs(
            label, runs, for_label(gpus, label), scaling, dict(slo or {}), window_s, price
        )
        analysed += stored
    every_run = [run for runs in groups.values() for run in runs]
    lost = [{"run": str(run.path), **lost} for run in every_run for lost in run.meta.get("lost_workers") or []]
    missing = [entry for run in every_run for entry in unaccounted_requests(run)]
    summary = build_summary(configs, dict(slo) if slo else None, lost, missing)
    write_outputs(summary, timelines, Path(out), figures_wanted(figures))
    llmd.write_reports(analysed, Path(out))  # llm-d's Benchmark Report of each run and level, beside ours
    db = db or store.default_db()
    if db:
        summary["store_ids"] = store.record(db, summary, analysed)
    return summary


def summarise_runs(
    label: str,
    runs: list[Run],
    gpus: int | None,
    scaling: tuple[int, int] | None,
    slo: dict[str, float],
    window_s: float | None,
    gpu_hour_price: float | None = None,
) -> tuple[ConfigSummary, list[Timeline], list[StoredRun]]:
    """The summary of one config's runs, their timelines, and their level rows for the results store."""
    levels, run_info, timelines, stored, replicas = [], [], [], [], []
    for run in runs:
        windows, stats, partial, run_replicas = windows_and_stats(run, slo)
        levels.append(RunLevels(run, windows, stats))
        replicas.append(run_replicas)
        stored.append((label, run, stats))
        run_info.append(describe_run(run, partial))
        timelines.append((str(run.path), timeline(run.requests), windows.assign(steady=stats["steady"].to_numpy())))
    config = summarise_config(label, levels, run_info, gpus, scaling, pd.concat(replicas), gpu_hour_price, window_s)
    return config, timelines, stored


def windows_and_stats(
    run: Run, slo: dict[str, float] | None = None
) -> tuple[pd.DataFrame, pd.DataFrame, bool, pd.DataFrame]:
    """A run's level windows, its per-level rows (``level_stats``), whether it is partial, and its replicas' level
    rows (``replica_levels``)."""
    windows, partial = level_windows(run)
    if windows.empty:
        raise AnalysisError(f"{run.path}: no level reached a steady-state window")
    replicas = replica_levels(run.tables.get("server_replicas"), windows, run.requests)
    return windows, level_stats(run, windows, slo, replicas), partial, replicas


def run_levels(path: str | Path, traffic_class: str = "") -> pd.DataFrame:
    """One row per level of one run folder (``level_stats``), for tools that compare or export single runs; with
    ``traffic_class``, of that class's requests only."""
    run = load_run(path)
    _, levels, _, _ = windows_and_stats(only_class(run, traffic_class) if traffic_class else run)
    return levels


def group_runs(
    dirs: Sequence[str | Path], labels: str | Mapping[str, str] | None, canaries_in_figures: bool | None = None
) -> dict[str, list[Run]]:
    """Load every dir (its canary requests in the figures or apart: ``load_run``) and group the runs by label, in
    the order the labels first appear."""
    by_path = {} if labels is None or isinstance(labels, str) else {Path(d).resolve(): n for d, n in labels.items()}
    groups: dict[str, list[Run]] = {}
    for directory in dirs:
        run = load_run(directory, canaries_in_figures)
        label = labels if isinstance(labels, str) else by_path.get(Path(directory).resolve()) or default_label(run)
        groups.setdefault(label, []).append(run)
    return groups


def for_label(value: Number | Mapping[str, Number] | None, label: str) -> Number | None:
    """One config's value of a per-config option (its GPU count, its GPU-hour price)."""
    if isinstance(value, Mapping):
        return value.get(label, value.get(ANY_LABEL))
    return value


def default_label(run: Run) -> str:
    """'model · scenario' from run.json, or the folder name."""
    parts = [str(run.meta[key]) for key in ("model", "scenario") if run.meta.get(key)]
    return " · ".join(parts) or run.path.name


def describe_run(run: Run, partial: bool) -> RunInfo:
    """What the summary keeps about one run besides its levels."""
    exceptions = run.tables.get("locust_exceptions")
    failures = run.tables.get("locust_failures")
    return {
        "dir": str(run.path),
        "partial": partial,
        "windows": "levels.csv hold windows" if "levels" in run.tables else "derived from request rows",
        "meta": run.meta,
        "errors": error_counts(run.every_row),  # the whole run's, its canaries' too
        "aborted": int(classify(run.every_row)["aborted"].sum()),
        "locust_exceptions": 0 if exceptions is None else int(exceptions["Count"].sum()),
        "locust_failures": {}
        if failures is None
        else {str(error): int(n) for error, n in failures.groupby("Error")["Occurrences"].sum().items()},
        "format_version": run.format_version,
        "not_computed": not_computed(run.format_version),
        "notes": run.notes,
        "unjoined_spans": run.unjoined_spans,
    }


def write_outputs(summary: Summary, timelines: dict[str, list[Timeline]], out: Path, figures: bool) -> None:
    """The figures (unless not ``figures``), report.md, report.html and summary.json into ``out`` (created if
    needed)."""
    if out.exists() and not out.is_dir():
        raise AnalysisError(f"{out}: output path exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    blocks = build_report(summary, write_figures(summary, timelines, out) if figures else None)
    (out / REPORT_MD).write_text(to_markdown(blocks))
    (out / REPORT_HTML).write_text(to_html(blocks, TITLE))
    (out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")


def write_figures(summary: Summary, timelines: dict[str, list[Timeline]], out: Path) -> dict[str, Path]:
    """Every figure of the report as a PNG in ``out``: {title: path}."""
    plots = write_plots(summary["configs"], timelines, out)
    for feature in features():
        plots |= feature.figures(summary["configs"], out)
    points = pareto_points(summary["configs"])
    if not points.empty:
        plots[PARETO_PLOT] = plot_pareto(points, summary["slo"], out / "pareto.png")
    return plots


def unaccounted_requests(run: Run) -> list[Unaccounted]:
    """[{run, server_requests, rows, unaccounted_requests, lost_with}] when the server finished requests of this run
    that have no row (run.json unaccounted_requests, from the server's own counter), else []."""
    missing = run.meta.get("unaccounted_requests")
    if not missing:
        return []
    return [
        {
            "run": str(run.path),
            "server_requests": run.meta["server_requests"],
            "rows": len(run.every_row),
            "unaccounted_requests": missing,
            "lost_with": [lost["worker"] for lost in run.meta["lost_workers"]],
        }
    ]
