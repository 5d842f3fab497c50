"""Prefix caching in the analysis: each level's prefix-cache hit rate, from the rows' cached tokens and from the
server's counters, by tier (the GPU's prefix cache, a KV connector's such as a CPU offload tier), the KV-capacity
verdict where the hit rate falls as the levels grow (docs/concepts/kv-tiers.md), and, with --prefix-hit-rate, the
rate its prompts were built for: columns of the per-level table and sections setting the rates against those."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from vllm_stress.analysis.features import Column, Config, ConfigInput, LevelInput
from vllm_stress.analysis.measures import counter_ratio, prefix_hit_rates, server_prefix_hit_rate
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.numbers import count, formatted, percent

FIELDS = {
    "prefix_hit_rate": "prompt tokens the server found in its prefix cache / prompt tokens, over the measured "
    "requests whose usage said (cached_tokens; vLLM with --enable-prompt-tokens-details)",
    "server_prefix_hit_rate": "the same from the server's counters: vllm:prefix_cache_hits / queries during the window",
    "server_external_hit_rate": "the hit rate of the server's KV connector (a CPU offload tier, LMCache): "
    "vllm:external_prefix_cache_hits / queries during the window, its queries the prompt tokens the GPU's cache missed",
    "connector_hit_rate": "the KV connector's own hit rate (LMCache's lmcache:num_lookup_hits / num_lookup_tokens "
    "during the window, in vLLM's /metrics or from --connector-metrics-url): of whole prompts, so it counts what the "
    "GPU held too (empty without them)",
    "prefix_hit_target": "--prefix-hit-rate: the hit rate the level's prompts were built for, their shared-prefix "
    "tokens / prompt tokens over the requests that ended in the window (empty without)",
    "server_warmup_hit_rate": "how warm the level began: the server's vllm:prefix_cache_hits / queries gained from "
    "its ramp's start to its hold's (levels.csv); with --reset-prefix-cache the cache was emptied as the ramp began",
}
GPU, EXTERNAL, CONNECTOR = "server_prefix_hit_rate", "server_external_hit_rate", "connector_hit_rate"
CLIFF_DROP = 0.15  # a fall of 15 percentage points from the best level before it: past a tier, not noise
TIERS_NOTE = (
    "Hit rates by KV tier from the server's counters gained in each level's window: the GPU's prefix cache "
    "(vllm:prefix_cache_hits / queries) and its KV connector's, such as a CPU offload tier "
    "(vllm:external_prefix_cache_hits / queries, whose queries are the tokens the GPU missed); combined: prompt "
    "tokens either tier served / prompt tokens. A level whose rate falls 15 points below the best level before it "
    "has a working set past that tier's capacity (docs/concepts/kv-tiers.md). Connector (own): the connector's "
    "own count where it exports one (LMCache's lookups, of whole prompts): near the combined rate when it holds "
    "what the GPU holds."
)
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
            "server_external_hit_rate": server_prefix_hit_rate(
                level.run.tables.get("server"), level.windows, "external_"
            ),
            "connector_hit_rate": counter_ratio(
                level.run.tables.get("server"), level.windows, "connector_lookup_hits", "connector_lookup_tokens"
            ),
            "prefix_hit_target": built_hit_rates(level.ended).reindex(index),
            "server_warmup_hit_rate": warmup_hit_rates(level).reindex(index),
        },
        index=index,
    )


def warmup_hit_rates(level: LevelInput) -> pd.Series:
    """Per level of levels.csv: the server's hit rate from the ramp's start to the hold's (empty without them)."""
    levels = level.run.tables.get("levels")
    if levels is None or levels.empty:
        return pd.Series(dtype=float)
    before_hold = pd.DataFrame({"users": levels["users"], "start": levels["ramp_start"], "end": levels["hold_start"]})
    rates = server_prefix_hit_rate(level.run.tables.get("server"), before_hold)
    return pd.Series(rates, index=levels["users"].astype("int64").to_numpy()).groupby(level=0).first()


def built_hit_rates(rows: pd.DataFrame) -> pd.Series:
    """Per level: shared-prefix tokens / prompt tokens of the rows built for a target (--prefix-hit-rate)."""
    built = rows[rows["shared_prefix_tokens"].notna()].groupby("users")
    return built["shared_prefix_tokens"].sum() / built["target_prompt_tokens"].sum()


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``kv_tiers``: the KV-capacity verdict over the levels' hit rates by tier (None where no tier's rate fell)."""
    levels = pd.concat([run.stats for run in config.runs]).groupby("users")[[GPU, EXTERNAL]].mean()
    cache = config.runs[0].run.meta.get("server_cache_config") or {}
    blocks = cache.get("num_gpu_blocks")
    gpu_tokens = None if blocks is None else (int(blocks) - 1) * int(cache.get("block_size", 0))  # less its null block
    resets = [run.run.meta.get("prefix_cache_resets") for run in config.runs]
    return {"kv_tiers": kv_capacity_verdict(levels, gpu_tokens), "prefix_cache_resets": cache_resets(resets)}


def cache_resets(runs: list[list[dict[str, Any]] | None]) -> dict[str, Any] | None:
    """--reset-prefix-cache over a config's runs: the levels asked, those the server emptied its cache for, and the
    first refusal's answer; None when no run asked."""
    asked = [reset for resets in runs for reset in resets or []]
    if not asked:
        return None
    refused = [reset for reset in asked if not reset["reset"]]
    answers = [answer["answer"] for answer in refused[0]["replicas"].values()] if refused else []
    return {"levels": len(asked), "reset": len(asked) - len(refused), "refusal": "; ".join(answers) or None}


def kv_capacity_verdict(levels: pd.DataFrame, gpu_tokens: int | None) -> dict[str, Any] | None:
    """Where the working set outgrew a tier (``tier_cliffs``); ``levels``: the GPU and external rates by users,
    ascending."""
    cliffs = tier_cliffs(levels)
    if cliffs is None:
        return None
    past_gpu, past_cpu, has_tier = cliffs
    return {
        "tier": "CPU tier" if past_cpu is not None else "GPU cache",
        "gpu_users": int(past_gpu),
        "cpu_users": None if past_cpu is None else int(past_cpu),
        "gpu_tokens": gpu_tokens,
        "verdict": verdict_text(levels, past_gpu, past_cpu, gpu_tokens, has_tier),
    }


def tier_cliffs(levels: pd.DataFrame) -> tuple[Any, Any, bool] | None:
    """The first level whose GPU hit rate fell CLIFF_DROP below the best of the levels before (past the GPU cache)
    and, with a tier behind it that hit, the first level from there whose combined rate (tokens from either tier /
    prompt tokens) fell so (past the CPU tier; None where none), and whether a tier hit; None when the GPU's rate
    never fell. ``levels``: the GPU and external rates, indexed by what grows the working set (users, tokens),
    ascending."""
    gpu = levels[GPU].astype(float)
    external = levels[EXTERNAL].astype(float)
    past_gpu = first_fall(gpu)
    if past_gpu is None:
        return None
    combined = gpu + external.fillna(0) * (1 - gpu)  # external queries are the tokens the GPU missed
    has_tier = bool((external > 0).any())
    past_cpu = first_fall(combined[combined.index >= past_gpu]) if has_tier else None
    if past_cpu is not None and combined.loc[past_cpu] > combined[combined.index < past_gpu].max() - CLIFF_DROP:
        past_cpu = None  # fell only from the tier's own best, still above what the GPU alone once gave
    return past_gpu, past_cpu, has_tier


def first_fall(rates: pd.Series) -> Any:
    """The first index whose rate lies CLIFF_DROP or more below the best rate before it; None if none does."""
    best = rates.cummax().shift()
    fallen = rates[rates <= best - CLIFF_DROP]
    return None if fallen.empty else fallen.index[0]


def verdict_text(levels: pd.DataFrame, past_gpu: Any, past_cpu: Any, gpu_tokens: int | None, has_tier: bool) -> str:
    gpu, external = levels[GPU], levels[EXTERNAL]
    size = "" if gpu_tokens is None else f" of {count(gpu_tokens)} tokens"
    gpu_fall = f"GPU hit rate {percent(gpu[gpu.index < past_gpu].max())} → {percent(gpu.loc[past_gpu])}"
    if past_cpu is not None:
        return (
            f"KV-capacity-bound: the working set passed the CPU tier at {past_cpu} users (external hit rate "
            f"{percent(external.loc[past_cpu])}), after the GPU cache{size} at {past_gpu} users ({gpu_fall})"
        )
    carried = f"; the CPU tier carried it: external hit rate {percent(external.loc[past_gpu])}" if has_tier else ""
    return f"KV-capacity-bound: the working set passed the GPU cache{size} at {past_gpu} users ({gpu_fall}{carried})"


def used(config: Config) -> bool:
    """A level whose rows or server said what its prefix cache held."""
    return any(level.get(field) is not None for level in config["levels"] for field in FIELDS)


def columns(config: Config) -> list[Column]:
    def hits(level: Config) -> str:
        return f"{percent(level.get('prefix_hit_rate'))} / {percent(level.get('server_prefix_hit_rate'))}"

    tier = [Column("External hits", lambda level: percent(level.get(EXTERNAL)))] if tiered(config) else []
    return [Column("Prefix hits (rows / server)", hits), *tier]


def tiered(config: Config) -> bool:
    """Whether the server's KV connector was asked for tokens in some level (a CPU tier or another connector)."""
    return any(level.get(EXTERNAL) is not None for level in config["levels"])


def overview(label: str, config: Config) -> list[str]:
    verdict = config.get("kv_tiers")
    return ([f"In {label}, {verdict['verdict']}."] if verdict else []) + reset_sentences(label, config)


def reset_sentences(label: str, config: Config) -> list[str]:
    """What --reset-prefix-cache did, and how warm the levels began where the server kept its cache."""
    resets = config.get("prefix_cache_resets")
    if not resets:
        return []
    if resets["reset"] == resets["levels"]:
        return [f"In {label}, the server's prefix cache was emptied as each of its {resets['levels']} levels began."]
    warm = [
        f"{percent(level['server_warmup_hit_rate'])} at {level['users']} users"
        for level in config["levels"]
        if level.get("server_warmup_hit_rate") is not None
    ]
    how_warm = f"; their warm-ups hit the prefix cache for {', '.join(warm)} of prompt tokens" if warm else ""
    return [
        f"In {label}, the server emptied its prefix cache for {resets['reset']} of {resets['levels']} levels "
        f"(POST /reset_prefix_cache: {resets['refusal']}): the others began warm{how_warm}."
    ]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return tier_blocks(config) + target_blocks(config)


def tier_blocks(config: Config) -> list[Block]:
    """The hit rate by tier per level and the KV-capacity verdict, when the server's KV connector was asked."""
    if not tiered(config):
        return []
    own = any(level.get(CONNECTOR) is not None for level in config["levels"])
    rows = []
    for level in config["levels"]:
        gpu, external = level.get(GPU), level.get(EXTERNAL)
        combined = None if gpu is None else gpu + (external or 0) * (1 - gpu)
        connector = [percent(level.get(CONNECTOR))] if own else []
        rows.append([str(level["users"]), percent(gpu), percent(external), percent(combined), *connector])
    verdict = config.get("kv_tiers")
    said = Paragraph(verdict["verdict"] + ".") if verdict else Paragraph("No tier's hit rate fell as the levels grew.")
    headers = ["Users", "GPU prefix cache", "External (CPU tier)", "Combined", *(["Connector (own)"] if own else [])]
    table = Table(headers, rows)
    return [Heading("Prefix-cache hits by KV tier"), Paragraph(TIERS_NOTE), table, said]


def target_blocks(config: Config) -> list[Block]:
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
