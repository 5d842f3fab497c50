"""PNG plots of a summary and of run timelines, drawn with matplotlib's Agg canvas (no pyplot, no display)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from vllm_stress.analysis.levels import Level
from vllm_stress.analysis.summary import ConfigSummary

SMOOTHING_S = 10  # rolling mean of the timeline's output tok/s (shorter for runs under 300 s)
LOG_X_RATIO = 20  # use a log concurrency axis when the largest level is at least this many times the smallest
Timeline = tuple[str, pd.DataFrame, pd.DataFrame]  # a run: its folder, levels.timeline per second, its level windows


def new_figure(columns: int = 1, rows: int = 1, height: float = 4.0) -> tuple[Figure, list[Axes]]:
    """An Agg-backed figure and its axes as a flat list."""
    figure = Figure(figsize=(6.5 * columns, height * rows), layout="tight")
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, columns, squeeze=False)
    return figure, [ax for row in axes for ax in row]


def level_frame(levels: list[Level]) -> pd.DataFrame:
    """A config's levels as a DataFrame sorted by users, missing values (None in the summary) as NaN."""
    frame = pd.DataFrame(levels).sort_values("users")
    numeric = frame.columns.drop(["unstable", "bound", "steady", "steady_reason"], errors="ignore")
    frame[numeric] = frame[numeric].apply(pd.to_numeric)
    return frame


def plot_against_users(levels_by_label: Mapping[str, list[Level]], fields: list[tuple[str, str]], path: Path) -> Path:
    """One panel per (field, title): each label's mean against users, with 95 % CI error bars for repeats."""
    figure, axes = new_figure(columns=len(fields))
    for ax, (field, title) in zip(axes, fields, strict=True):
        for label, records in levels_by_label.items():
            levels = level_frame(records)
            errors = levels.get(f"{field}_ci95")
            ax.errorbar(levels["users"], levels[field], yerr=errors, marker="o", capsize=3, label=label)
            mark_unsteady(ax, levels, "users", field)
        users = pd.concat([level_frame(records)["users"] for records in levels_by_label.values()])
        if users.max() >= LOG_X_RATIO * users.min():
            ax.set_xscale("log")
        ax.set(title=title, xlabel="concurrency (users)")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def mark_unsteady(ax: Axes, levels: pd.DataFrame, x: str, y: str) -> None:
    """Circle in red the levels that were not steady (they are not the peak or the saturation point)."""
    unsteady = levels[~levels["steady"].astype(bool)]
    if not unsteady.empty:
        ax.scatter(
            unsteady[x],
            unsteady[y],
            s=160,
            facecolors="none",
            edgecolors="tab:red",
            linewidths=1.5,
            label="not steady",
            zorder=3,
        )


def plot_tradeoff(levels_by_label: Mapping[str, list[Level]], path: Path) -> Path:
    """p99 e2e latency against output tok/s, each point labelled with its concurrency."""
    figure, (ax,) = new_figure()
    for label, records in levels_by_label.items():
        levels = level_frame(records)
        ax.plot(levels["output_tokens_per_s"], levels["e2e_p99_s"], marker="o", label=label)
        mark_unsteady(ax, levels, "output_tokens_per_s", "e2e_p99_s")
        for _, level in levels.dropna(subset=["e2e_p99_s"]).iterrows():
            point = (level["output_tokens_per_s"], level["e2e_p99_s"])
            ax.annotate(str(int(level["users"])), point, xytext=(4, 4), textcoords="offset points", fontsize=7)
    ax.set(title="Throughput-latency curve", xlabel="output tok/s", ylabel="p99 e2e latency (s)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def plot_timeline(label: str, timelines: list[Timeline], path: Path) -> Path:
    """Per run of a config: requests in flight, failures and output tok/s per second, steady-state windows shaded."""
    figure, axes = new_figure(rows=len(timelines), height=2.6)
    for ax, (run_dir, seconds, windows) in zip(axes, timelines, strict=True):
        ax.plot(seconds["second"], seconds["in_flight"], color="tab:blue", linewidth=1)
        if seconds["failed"].any():
            ax.plot(seconds["second"], seconds["failed"], color="tab:red", linewidth=0.8, label="failed/s")
            ax.legend(fontsize="small", loc="upper left")
        ax.set_ylabel("in flight (dashed: target)", color="tab:blue")
        tokens = ax.twinx()
        smoothing_s = max(1, min(SMOOTHING_S, len(seconds) // 30))
        smoothed = seconds["output_tokens"].rolling(smoothing_s, min_periods=1, center=True).mean()
        tokens.plot(seconds["second"], smoothed, color="tab:orange", linewidth=1)
        tokens.set_ylabel(f"output tok/s ({smoothing_s} s mean)", color="tab:orange")
        tokens.set_ylim(bottom=0)
        origin = seconds["unix_time"].iloc[0]
        for _, window in windows.iterrows():
            ax.axvspan(
                window["start"] - origin,
                window["end"] - origin,
                alpha=0.1,
                color="tab:blue" if window["steady"] else "tab:red",
            )
            ax.hlines(
                window["users"], window["start"] - origin, window["end"] - origin, colors="tab:blue", linestyles="--"
            )
        ax.set(
            title=f"{label}: {run_dir} (shaded: level windows, red when not steady)",
            xlabel="seconds since first request",
        )
    figure.savefig(path, dpi=100)
    return path


def write_plots(
    configs: Mapping[str, ConfigSummary], timelines: Mapping[str, list[Timeline]], out: Path
) -> dict[str, Path]:
    """All plots of a summary's configs and their runs' timelines into ``out``; returns {title: path}."""
    levels = {label: config["levels"] for label, config in configs.items()}
    plots = {
        "Throughput vs concurrency": plot_against_users(
            levels,
            [("output_tokens_per_s", "output tok/s"), ("total_tokens_per_s", "total (input+output) tok/s")],
            out / "throughput.png",
        ),
        "p99 latency vs concurrency": plot_against_users(
            levels, [("e2e_p99_s", "p99 e2e latency (s)"), ("ttft_p99_s", "p99 TTFT (s)")], out / "latency.png"
        ),
        "Throughput-latency curve": plot_tradeoff(levels, out / "tradeoff.png"),
    }
    for index, (label, runs) in enumerate(timelines.items()):
        plots[f"Timeline: {label}"] = plot_timeline(label, runs, out / f"timeline_{index + 1}.png")
    return plots
