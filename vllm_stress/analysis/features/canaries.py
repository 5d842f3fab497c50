"""Correctness canaries in the analysis: per level the canaries' agreement and accuracy in the summary, the report's
line when answers changed under load and its table of them (vllm_stress.analysis.features.canary_answers)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vllm_stress.analysis.features import Config, ConfigInput
from vllm_stress.analysis.features.canary_answers import canary_blocks, canary_levels, changed_line, read_answers
from vllm_stress.analysis.report.render import Block


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``canaries``: per level, the correctness canaries' agreement and accuracy ([]: none were sent)."""
    return {"canaries": canary_levels(read_answers([run.run.path for run in config.runs]))}


def used(config: Config) -> bool:
    return bool(config.get("canaries"))


def overview(label: str, config: Config) -> list[str]:
    """Whether the canaries' answers changed under load."""
    if changed := changed_line(config["canaries"]):
        return [f"{label}: {changed}."]
    return [f"{label}: canary answers agree with the lowest level's at every level."]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return canary_blocks(label, config["canaries"])
