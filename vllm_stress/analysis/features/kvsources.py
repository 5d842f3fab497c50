"""Where each level's prompt tokens came from, by vLLM's own counters (docs/concepts/kv-tiers.md, "Prompt tokens by
source"): computed, found in the GPU's prefix cache or loaded by a KV connector (vllm:prompt_tokens_by_source), the
cached ones by the tier that held them (vllm:prompt_tokens_cached_by_source: device, host, disk, p2p), and how long
KV blocks lived in the cache (vllm:kv_block_*_seconds, vLLM with --kv-cache-metrics): the per-level fields, and a
section for each when the server exported it."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput
from vllm_stress.analysis.measures import counter_gains, histogram_means
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.numbers import percent, seconds
from vllm_stress.core.schema import KV_RESIDENCY_HISTOGRAMS, SERVER_SOURCE_COUNTERS

PROMPT_SOURCES = {  # level field -> server_metrics.csv column (vllm:prompt_tokens_by_source)
    "prompt_computed_share": "prompt_tokens_computed",
    "prompt_gpu_cache_share": "prompt_tokens_local_hit",
    "prompt_connector_share": "prompt_tokens_external",
}
CACHE_TIERS = {  # level field -> server_metrics.csv column (vllm:prompt_tokens_cached_by_source)
    f"cached_{column.removeprefix('cached_tokens_')}_share": column
    for column in SERVER_SOURCE_COUNTERS
    if column.startswith("cached_tokens_")
}
RESIDENCY = {f"{prefix}_mean_s": prefix for prefix in KV_RESIDENCY_HISTOGRAMS}  # level field -> histogram

FIELDS = {
    "prompt_computed_share": "prompt tokens the server computed (prefilled) / its prompt tokens, from "
    "vllm:prompt_tokens_by_source gained in the level's window (source local_compute)",
    "prompt_gpu_cache_share": "the same for the prompt tokens its GPU prefix cache held (source local_cache_hit)",
    "prompt_connector_share": "the same for those a KV connector loaded: a CPU offload tier, LMCache, another "
    "instance (source external_kv_transfer)",
    "cached_device_share": "cached prompt tokens the accelerator's memory held / all cached prompt tokens, from "
    "vllm:prompt_tokens_cached_by_source gained in the window",
    "cached_host_share": "the same for host memory (an offload tier in DRAM)",
    "cached_disk_share": "the same for disk",
    "cached_p2p_share": "the same for another vLLM instance (p2p)",
    "cached_unspecified_share": "the same for a connector that does not say its tier (external_unspecified)",
    "kv_block_lifetime_mean_s": "mean time a sampled KV block lived, allocated to evicted (vllm:kv_block_lifetime_"
    "seconds observed in the window; vLLM with --kv-cache-metrics)",
    "kv_block_idle_mean_s": "mean time from a block's last use to its eviction (vllm:kv_block_idle_before_evict_"
    "seconds)",
    "kv_block_reuse_gap_mean_s": "mean time between two uses of one block (vllm:kv_block_reuse_gap_seconds)",
}
TIER_NAMES = {"device": "GPU", "host": "Host (DRAM)", "disk": "Disk", "p2p": "Another instance", "unspecified": "Other"}
SOURCES_NOTE = (
    "Where each level's prompt tokens came from, by the server's counters gained in the level's window: computed "
    "(prefilled), found in the GPU's prefix cache, or loaded by a KV connector (vllm:prompt_tokens_by_source, "
    "shares of the prompt tokens); then the cached ones by the tier that held them "
    "(vllm:prompt_tokens_cached_by_source, shares of the cached tokens; tiers that held none are left out)."
)
RESIDENCY_NOTE = (
    "How long the server's KV blocks stayed cached, from vLLM's sampled block metrics (--kv-cache-metrics, "
    "--kv-cache-metrics-sample) observed in each level's window: a block's life from allocation to eviction, its "
    "idle time before eviction and the gap between two uses. A lifetime shorter than the gap between a prefix's uses "
    "means the cache loses the prefix before it comes back."
)


def level_fields(level: LevelInput) -> pd.DataFrame:
    return source_fields(level.run.tables.get("server"), level.windows).set_axis(level.base.index)


def source_fields(server: pd.DataFrame | None, windows: pd.DataFrame) -> pd.DataFrame:
    """FIELDS per window, in order: shares of the by-source counters' gains, means of the residency histograms."""
    fields: dict[str, np.ndarray] = {}
    for shares in (PROMPT_SOURCES, CACHE_TIERS):
        gains = {field: counter_gains(server, windows, column) for field, column in shares.items()}
        total = np.sum(list(gains.values()), axis=0)
        for field, gain in gains.items():
            fields[field] = np.divide(gain, total, out=np.full(len(windows), np.nan), where=total > 0)
    for field, prefix in RESIDENCY.items():
        fields[field] = histogram_means(server, windows, prefix)
    return pd.DataFrame(fields, index=windows["users"].to_numpy())


def used(config: Config) -> bool:
    """A level whose server said where its prompt tokens came from, or how long its blocks lived."""
    return any(level.get(field) is not None for level in config["levels"] for field in FIELDS)


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return source_blocks(config) + residency_blocks(config)


def source_blocks(config: Config) -> list[Block]:
    """The prompt tokens by source and the cached ones by tier, per level, when the server counted them."""
    levels = [level for level in config["levels"] if level.get("prompt_computed_share") is not None]
    if not levels:
        return []
    tiers = [field for field in CACHE_TIERS if any(level.get(field) for level in levels)]
    headers = ["Users", "Computed", "GPU prefix cache", "KV connector"]
    headers += [f"Cached: {TIER_NAMES[field.removeprefix('cached_').removesuffix('_share')]}" for field in tiers]
    rows = [
        [str(level["users"]), *(percent(level.get(field)) for field in (*PROMPT_SOURCES, *tiers))] for level in levels
    ]
    return [Heading("Prompt tokens by source"), Paragraph(SOURCES_NOTE), Table(headers, rows)]


def residency_blocks(config: Config) -> list[Block]:
    """The KV blocks' mean lifetime, idle time and reuse gap per level, when the server sampled them."""
    levels = [level for level in config["levels"] if any(level.get(field) is not None for field in RESIDENCY)]
    if not levels:
        return []
    headers = ["Users", "Block lifetime (mean)", "Idle before eviction (mean)", "Reuse gap (mean)"]
    rows = [[str(level["users"]), *(seconds(level.get(field)) for field in RESIDENCY)] for level in levels]
    return [Heading("KV block lifetimes"), Paragraph(RESIDENCY_NOTE), Table(headers, rows)]
