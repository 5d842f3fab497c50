"""Elastic fleets in the analysis: each run's replica set over time (replicas.csv), its scale-ups and their lag in the
summary, and the report's tables and plot of them when the fleet scaled (vllm_stress.analysis.features.replica_set)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_stress.analysis.features import Config, ConfigInput
from vllm_stress.analysis.features.replica_set import scaling, scaling_blocks
from vllm_stress.analysis.io.json_types import to_json_types
from vllm_stress.analysis.report.render import Block


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``replica_set``: per run with replicas.csv (a fleet that may scale), its ``replica_set.scaling``."""
    fleets = [run.run for run in config.runs if "replica_set" in run.run.tables]
    if not fleets:
        return {}
    price = config.gpu_hour_price
    scaled = [scaling(str(run.path), run.tables["replica_set"], run.requests, config.gpus, price) for run in fleets]
    return {"replica_set": to_json_types(scaled)}


def used(config: Config) -> bool:
    """A run's fleet scaled: it added or removed a replica."""
    return any(run["scale_ups"] or run["leaves"] for run in config.get("replica_set", []))


def figures(configs: Mapping[str, Config], out: Path) -> dict[str, Path]:
    """The replicas-over-time plot of each config whose fleet scaled."""
    from vllm_stress.analysis.figures.scalingplot import (
        write_scaling_plots,  # here: matplotlib only when plots are drawn
    )

    return write_scaling_plots(configs, out)


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return scaling_blocks(label, config["replica_set"])
