"""Fleets and replicas in the analysis: how evenly a level's load spread over the replicas behind a router, its column
of the per-level table, and the report's table of each replica at each level (vllm_stress.analysis.replicas)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Column, Config, LevelInput
from vllm_stress.analysis.report.render import Block, Paragraph, Table
from vllm_stress.core import fleet
from vllm_stress.core.numbers import count, percent

FIELDS = {
    "replica_imbalance": "with --server-metrics-url (replicas behind a router): the busiest replica's mean running "
    "requests over the window / the replicas' mean (1: even load)",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    """vllm_stress.core.fleet.imbalance of each level's per-replica mean running requests (NaN without replicas)."""
    replicas = level.replicas
    if replicas is None or replicas.empty:
        return pd.DataFrame({"replica_imbalance": float("nan")}, index=level.base.index)
    imbalance = replicas.groupby("users")["running_mean"].agg(lambda means: fleet.imbalance(list(means)))
    return imbalance.astype(float).rename("replica_imbalance").reindex(level.base.index).to_frame()


def used(config: Config) -> bool:
    """The config's server had replicas whose own /metrics were read."""
    return bool(config.get("replicas")) or any(level.get("replica_imbalance") is not None for level in config["levels"])


def columns(config: Config) -> list[Column]:
    if all(level.get("replica_imbalance") is None for level in config["levels"]):
        return []
    return [Column("Replica imbalance", lambda level: count(level.get("replica_imbalance"), 2))]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    """Each replica at each level (--server-metrics-url, or --host naming several): its mean running and waiting
    requests, its share of the requests finished and its prefix-cache hit rate; nothing for one server."""
    if not config.get("replicas"):
        return []
    rows = [
        [
            str(row["users"]),
            row["replica"],
            count(row["running_mean"], 1),
            count(row.get("waiting_mean"), 1),
            percent(row["request_share"]),
            percent(row.get("prefix_cache_hit_rate")),
        ]
        for row in config["replicas"]
    ]
    headers = ["Users", "Replica", "Running (mean)", "Waiting (mean)", "Share of requests finished"]
    return [
        Paragraph(f"Replicas of {config['label']} (their own /metrics; with client-side spreading, the rows' share):"),
        Table([*headers, "Prefix-cache hit rate"], rows),
    ]
