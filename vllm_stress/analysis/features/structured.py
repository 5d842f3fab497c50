"""Structured outputs in the analysis: each level's schema requests, their validity and TTFT/TPOT beside the
unconstrained requests', and the report's table of them (vllm_stress.analysis.features.structured_levels)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput
from vllm_stress.analysis.features.structured_levels import STRUCTURED_FIELDS, structured_blocks, structured_stats
from vllm_stress.analysis.report.render import Block

FIELDS = STRUCTURED_FIELDS


def level_fields(level: LevelInput) -> pd.DataFrame:
    return structured_stats(level.ended, level.base.index)


def used(config: Config) -> bool:
    """A level sent a schema."""
    return any(level.get("structured_requests") for level in config["levels"])


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return structured_blocks(label, configs)
