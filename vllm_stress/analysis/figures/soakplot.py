"""The plot of a soak's drift (vllm_stress.analysis.features.soak): each metric's per-window figure against hours into
the hold, as a share of its mean, so metrics of every unit share one axis and a flat line is no drift."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from vllm_stress.analysis.figures.plots import new_figure, save
from vllm_stress.core.drift import DRIFT_RULES


def soak_figure(soak: Mapping[str, Any], path: Path) -> Path:
    """One line per metric with a value: its windows / their mean, a drifted metric drawn thick."""
    figure, [ax] = new_figure(height=3.6)
    hours = [(w["start_s"] + soak["window_s"] / 2) / 3600 for w in soak["windows"]]
    for metric, rule in DRIFT_RULES.items():
        values = np.array([np.nan if w[metric] is None else w[metric] for w in soak["windows"]], dtype=float)
        if np.isnan(values).all() or not np.nanmean(values):
            continue
        drifted = soak["drift"][metric]["drifted"]
        ax.plot(hours, values / np.nanmean(values), marker=".", linewidth=2.5 if drifted else 1, label=rule.label)
    ax.axhline(1.0, color="grey", linewidth=0.5)
    ax.set(xlabel="hours into the hold", ylabel="share of its mean", title=f"Soak: {soak['users']} users")
    ax.legend(fontsize="x-small", loc="best")
    return save(figure, path)
