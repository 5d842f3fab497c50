"""The Pareto front of interactivity against throughput: every steady level of every config as a point (output tok/s
per user, output tok/s per GPU), the points no other beats on both, as a table and a plot
(docs/concepts/analysis.md, "Capacity planning")."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from vllm_stress.analysis.figures.plots import label_points, level_frame, new_figure, save
from vllm_stress.analysis.measures import records
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.analysis.summary import ConfigSummary
from vllm_stress.core.numbers import count

PER_USER = "output_tokens_per_s_per_user"
PER_GPU = "output_tokens_per_s_per_gpu"
PARETO_PLOT = "Throughput vs interactivity (Pareto front)"
PARETO_NOTE = (
    "Every steady level of every config: output tok/s per user (1 / TPOT p50: the speed a user reads at once "
    "streaming, which TTFT, queueing and idle users do not blur as output tok/s / users would) against output tok/s "
    "per GPU (per deployment for a config without --gpus). On the front: no other level is at least as good on both "
    "and better on one; the levels off it are beaten by one on it. With --slo tpot=..., the levels whose TPOT p50 "
    "meets the limit."
)


def pareto_points(configs: Mapping[str, ConfigSummary]) -> pd.DataFrame:
    """One row per steady level with both figures: label, users, per_user, per_gpu (output tok/s per deployment for
    a config without --gpus, gpus_given False) and front (no other point is at least as good on both and better on one)."""
    frames = []
    for label, config in configs.items():
        levels = level_frame(config["levels"])
        per_gpu = levels[PER_GPU] if PER_GPU in levels else levels["output_tokens_per_s"]
        frames.append(
            pd.DataFrame(
                {
                    "label": label,
                    "users": levels["users"],
                    "per_user": levels[PER_USER],
                    "per_gpu": per_gpu,
                    "gpus_given": PER_GPU in levels,
                }
            ).loc[levels["steady"].astype(bool).to_numpy()]
        )
    points = pd.concat(frames, ignore_index=True).dropna(subset=["per_user", "per_gpu"])
    return points.assign(front=on_front(points["per_user"].to_numpy(float), points["per_gpu"].to_numpy(float)))


def on_front(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Which points (x[i], y[i]) no other point dominates: at least as large on both and larger on one."""
    dominated = [bool(np.any((x >= xi) & (y >= yi) & ((x > xi) | (y > yi)))) for xi, yi in zip(x, y, strict=True)]
    return ~np.array(dominated, dtype=bool)


def pareto_table(points: pd.DataFrame, slo: Mapping[str, float] | None) -> Table:
    """The front's points by throughput, then the others; with a TPOT limit, whether each point meets it."""
    limit = (slo or {}).get("tpot")
    headers = ["Config", "Users", "Output tok/s per user", "Output tok/s per GPU", "On the front"]
    headers += [f"TPOT p50 within {limit * 1000:g} ms"] if limit else []
    rows = []
    for point in records(points.sort_values(["front", "per_gpu"], ascending=False)):
        row = [str(point["label"]), str(point["users"]), count(point["per_user"], 1), count(point["per_gpu"], 1)]
        row += ["yes" if point["front"] else "no"]
        row += (["yes" if point["per_user"] >= 1 / limit else "no"]) if limit else []
        rows.append(row)
    return Table(headers, rows)


def plot_pareto(points: pd.DataFrame, slo: Mapping[str, float] | None, path: Path) -> Path:
    """The pareto_figure of ``points``, saved at ``path``."""
    return save(pareto_figure(points, slo), path)


def pareto_figure(points: pd.DataFrame, slo: Mapping[str, float] | None) -> Figure:
    """Throughput per GPU against interactivity, each config's levels labelled with their users (levels that coincide
    under one label, "200/500/1000"), the front joined, and the TPOT limit as the interactivity it allows."""
    figure, (ax,) = new_figure()
    for label, config_points in points.groupby("label", sort=False):
        ax.scatter(config_points["per_user"], config_points["per_gpu"], label=str(label), zorder=2)
    front = points[points["front"]].sort_values("per_user")
    ax.plot(front["per_user"], front["per_gpu"], color="black", linewidth=1, label="Pareto front", zorder=1)
    if slo and slo.get("tpot"):
        ax.axvline(1 / slo["tpot"], color="tab:red", linestyle="--", label=f"TPOT {slo['tpot'] * 1000:g} ms")
    ax.set(title="Throughput vs interactivity", xlabel="output tok/s per user (1 / TPOT p50)")
    ax.set(ylabel=throughput_axis(points))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    label_points(figure, ax, [(p["per_user"], p["per_gpu"], str(p["users"])) for p in records(points)])
    return figure


def throughput_axis(points: pd.DataFrame) -> str:
    """The y axis' label: per GPU when every config gave --gpus, per deployment when none did."""
    given = set(points["gpus_given"])
    if given == {True}:
        return "output tok/s per GPU"
    return (
        "output tok/s per deployment (no --gpus)"
        if given == {False}
        else "output tok/s per GPU (per deployment without --gpus)"
    )


def pareto_blocks(configs: Mapping[str, ConfigSummary], slo: Mapping[str, float] | None) -> list[Block]:
    """The report's section: the note and the table; [] without a steady level with both figures."""
    points = pareto_points(configs)
    if points.empty:
        return []
    return [Heading(PARETO_PLOT), Paragraph(PARETO_NOTE), pareto_table(points, slo)]
