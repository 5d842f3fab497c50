"""Prefill/decode disaggregation in the analysis: each level's prefill and decode instances, KV transfers and TTFT
split, the bound they decide, and the report's P/D table (vllm_stress.analysis.features.disagg, .disaggreport)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput, disagg
from vllm_stress.analysis.features.disaggreport import known, pd_blocks
from vllm_stress.analysis.report.render import Block
from vllm_stress.core.pdbound import PD_FIELDS

FIELDS = PD_FIELDS


def level_fields(level: LevelInput) -> pd.DataFrame:
    return disagg.pd_levels(level.run, level.windows, level.measured)


def bounds(levels: pd.DataFrame) -> pd.Series | None:
    """The P/D verdicts when the levels have prefill and decode roles (vllm_stress.core.pdbound), else None."""
    return disagg.pd_bounds(levels) if disagg.has_roles(levels) else None


def used(config: Config) -> bool:
    """A level has a client TTFT split into the prefill, the transfer and the first decode step."""
    return any(known(level, "ttft_client_mean_s") for level in config["levels"])


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return pd_blocks(config)
