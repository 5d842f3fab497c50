"""Traffic classes in the analysis: each class's level rows, fairness and verdicts in the summary, and the report's
table of them (vllm_stress.analysis.features.class_levels)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_stress.analysis.features import Config, ConfigInput
from vllm_stress.analysis.features.class_levels import (
    class_blocks,
    class_level_rows,
    declared_classes,
    summarise_classes,
)
from vllm_stress.analysis.report.render import Block


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``classes``: the report per class (--traffic-class), None when the runs had none."""
    per_run = [class_level_rows(run.run, run.windows, config.level_stats) for run in config.runs]
    return {"classes": summarise_classes(per_run, declared_classes(config.runs[0].run))}


def used(config: Config) -> bool:
    return bool(config.get("classes"))


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return class_blocks(label, config["classes"])
