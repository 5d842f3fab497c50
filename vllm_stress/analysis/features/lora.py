"""LoRA adapters in the analysis: each level's adapter slots on the server (the adapter-bound verdict's figures), the
summary's figures per adapter drawn, and the report's table of them (vllm_stress.analysis.features.adapters)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from vllm_stress.analysis.features import Config, ConfigInput, LevelInput
from vllm_stress.analysis.features.adapters import adapter_blocks, adapter_levels, merge_runs
from vllm_stress.analysis.measures import gauge_means
from vllm_stress.analysis.report.render import Block
from vllm_stress.core import bound

FIELDS = {
    "server_lora_adapters_mean": "the mean of lora_running (server_metrics.csv) over the window",
    "server_max_lora": "the mean of max_lora (server_metrics.csv) over the window",
    "server_deferred_mean": "the mean of waiting_deferred (server_metrics.csv) over the window",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    """The mean of each LoRA slot gauge of server_metrics.csv (bound.LORA_LEVEL_FIELDS) over each window."""
    server = level.run.tables.get("server")
    slots = {field: gauge_means(server, level.windows, column) for field, column in bound.LORA_LEVEL_FIELDS.items()}
    return pd.DataFrame(slots, index=level.base.index)


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``adapters``: per level and adapter drawn (--lora-adapters), when any was."""
    merged = merge_runs([adapter_levels(run.run, run.windows) for run in config.runs])
    return {"adapters": merged} if merged else {}


def used(config: Config) -> bool:
    return bool(config.get("adapters"))


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return adapter_blocks(label, config["adapters"])
