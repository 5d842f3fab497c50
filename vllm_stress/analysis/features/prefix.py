"""Prefix caching in the analysis: each level's prefix-cache hit rate, from the rows' cached tokens and from the
server's counters, and its column of the per-level table."""

from __future__ import annotations

import pandas as pd

from vllm_stress.analysis.features import Column, Config, LevelInput
from vllm_stress.analysis.measures import prefix_hit_rates, server_prefix_hit_rate
from vllm_stress.core.numbers import percent

FIELDS = {
    "prefix_hit_rate": "prompt tokens the server found in its prefix cache / prompt tokens, over the measured "
    "requests whose usage said (cached_tokens; vLLM with --enable-prompt-tokens-details)",
    "server_prefix_hit_rate": "the same from the server's counters: vllm:prefix_cache_hits / queries during the window",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    index = level.base.index
    return pd.DataFrame(
        {
            "prefix_hit_rate": prefix_hit_rates(level.measured, "users").reindex(index),
            "server_prefix_hit_rate": server_prefix_hit_rate(level.run.tables.get("server"), level.windows),
        },
        index=index,
    )


def used(config: Config) -> bool:
    """A level whose rows or server said what its prefix cache held."""
    return any(level.get(field) is not None for level in config["levels"] for field in FIELDS)


def columns(config: Config) -> list[Column]:
    def hits(level: Config) -> str:
        return f"{percent(level.get('prefix_hit_rate'))} / {percent(level.get('server_prefix_hit_rate'))}"

    return [Column("Prefix hits (rows / server)", hits)]
