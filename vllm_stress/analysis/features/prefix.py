"""Prefix caching in the analysis: each level's prefix-cache hit rate, from the rows' cached tokens and from the
server's counters, and, with --prefix-hit-rate, the rate its prompts were built for: a column of the per-level table
and a section setting the server's measured rate against that target."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Column, Config, LevelInput
from vllm_stress.analysis.measures import prefix_hit_rates, server_prefix_hit_rate
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.numbers import formatted, percent

FIELDS = {
    "prefix_hit_rate": "prompt tokens the server found in its prefix cache / prompt tokens, over the measured "
    "requests whose usage said (cached_tokens; vLLM with --enable-prompt-tokens-details)",
    "server_prefix_hit_rate": "the same from the server's counters: vllm:prefix_cache_hits / queries during the window",
    "prefix_hit_target": "--prefix-hit-rate: the hit rate the level's prompts were built for, their shared-prefix "
    "tokens / prompt tokens over the requests that ended in the window (empty without)",
}
TARGET_NOTE = (
    "With --prefix-hit-rate each prompt opens with whole KV blocks of its group's prefix (the chat template's own "
    "tokens included), so many that the shared tokens are the target share of the prompt tokens; the server's rate "
    "is its vllm:prefix_cache_hits / vllm:prefix_cache_queries gained in the level's window. A group's first request "
    "misses, in the first level's ramp and warm-up; a server whose KV cache cannot keep every group's prefix, or "
    "whose block size is not --kv-block-size, falls short of the target."
)


def level_fields(level: LevelInput) -> pd.DataFrame:
    index = level.base.index
    return pd.DataFrame(
        {
            "prefix_hit_rate": prefix_hit_rates(level.measured, "users").reindex(index),
            "server_prefix_hit_rate": server_prefix_hit_rate(level.run.tables.get("server"), level.windows),
            "prefix_hit_target": built_hit_rates(level.ended).reindex(index),
        },
        index=index,
    )


def built_hit_rates(rows: pd.DataFrame) -> pd.Series:
    """Per level: shared-prefix tokens / prompt tokens of the rows built for a target (--prefix-hit-rate)."""
    built = rows[rows["shared_prefix_tokens"].notna()].groupby("users")
    return built["shared_prefix_tokens"].sum() / built["target_prompt_tokens"].sum()


def used(config: Config) -> bool:
    """A level whose rows or server said what its prefix cache held."""
    return any(level.get(field) is not None for level in config["levels"] for field in FIELDS)


def columns(config: Config) -> list[Column]:
    def hits(level: Config) -> str:
        return f"{percent(level.get('prefix_hit_rate'))} / {percent(level.get('server_prefix_hit_rate'))}"

    return [Column("Prefix hits (rows / server)", hits)]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    """The target against the server's measured rate per level, when the run had a target."""
    levels = [level for level in config["levels"] if level.get("prefix_hit_target") is not None]
    if not levels:
        return []
    rows = [
        [
            str(level["users"]),
            percent(level["prefix_hit_target"]),
            percent(level.get("server_prefix_hit_rate")),
            off_by(level["prefix_hit_target"], level.get("server_prefix_hit_rate")),
            percent(level.get("prefix_hit_rate")),
        ]
        for level in levels
    ]
    headers = ["Users", "Target", "Server", "Server − target", "Rows (cached_tokens)"]
    note = TARGET_NOTE + server_block_note(config)
    return [Heading("Prefix-cache hit rate against its target"), Paragraph(note), Table(headers, rows)]


def server_block_note(config: Config) -> str:
    """The server's KV block size when it exported it (vllm:cache_config_info), what --kv-block-size must be."""
    block_size = (config.get("kv_cache") or {}).get("block_size")
    return "" if block_size is None else f" This server's KV blocks hold {block_size} tokens (vllm:cache_config_info)."


def off_by(target: float, measured: float | None) -> str:
    """The measured rate less the target, in percentage points."""
    return formatted(None if measured is None else measured - target, lambda v: f"{v * 100:+.1f} pt")
