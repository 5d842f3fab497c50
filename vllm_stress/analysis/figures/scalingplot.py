"""The plot of a fleet's replicas over time (vllm_stress.analysis.features.replica_set): the replicas up as a step line,
the fleet's waiting and running requests beneath, each scale-up's lag shaded from the queue's growth to the new replica
serving."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure

from vllm_stress.analysis.figures.plots import new_figure, run_title, save


def scaling_figure(label: str, runs: list[dict[str, Any]]) -> Figure:
    """Per run: replicas up (top) and requests waiting and running (bottom), against seconds since the first look."""
    figure, axes = new_figure(rows=2 * len(runs), height=2.6)
    for index, run in enumerate(runs):
        top, bottom = axes[2 * index], axes[2 * index + 1]
        at, replicas, running, waiting = (list(column) for column in zip(*run["series"], strict=True))
        top.step(at, replicas, where="post", color="tab:green", linewidth=1.5)
        top.set(title=run_title(label, run["run"]), ylabel="replicas up", ylim=(0, max(replicas) + 1))
        bottom.plot(at, waiting, color="tab:red", linewidth=1, label="waiting")
        bottom.plot(at, running, color="tab:blue", linewidth=1, label="running")
        bottom.set(ylabel="requests (fleet)", xlabel="seconds since the first look at the replicas")
        for up in [up for up in run["scale_ups"] if up["queue_grew_s"] is not None]:
            end = up["serving_s"] if up["serving_s"] is not None else at[-1]
            for ax in (top, bottom):
                ax.axvspan(up["queue_grew_s"], end, color="tab:orange", alpha=0.15, linewidth=0)
        bottom.legend(fontsize="x-small", loc="upper right")
    return figure


def write_scaling_plots(configs: Mapping[str, Mapping[str, Any]], out: Path) -> dict[str, Path]:
    """The replicas-over-time plot of each config whose runs tracked a replica set: {title: path}."""
    return {
        f"Replicas over time: {label}": save(
            scaling_figure(label, config["replica_set"]), out / f"scaling_{index + 1}.png"
        )
        for index, (label, config) in enumerate(configs.items())
        if config.get("replica_set")
    }
