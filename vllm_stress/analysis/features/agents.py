"""Agent tasks in the analysis: per level the tasks' rate, latency and completion in the summary, and the report's
table of them (vllm_stress.analysis.features.tasks)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_stress.analysis.features import Config, ConfigInput
from vllm_stress.analysis.features.tasks import read_tasks, task_blocks, task_levels
from vllm_stress.analysis.report.render import Block


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``tasks``: per level, the agent tasks' figures ([]: no agent user ran)."""
    return {"tasks": task_levels([task for run in config.runs for task in read_tasks(run.run.path, run.windows)])}


def used(config: Config) -> bool:
    return bool(config.get("tasks"))


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return task_blocks(label, config["tasks"])
