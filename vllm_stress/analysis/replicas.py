"""Each replica at each level: its mean running and waiting requests, its share of the requests and its prefix-cache hit rate,
from its own /metrics rows of server_metrics.csv (--server-metrics-url, or --host naming several) and, when the
users spread the requests themselves, from the rows of requests.csv that name it (docs/guides/fleets.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vllm_stress.analysis.measures import counter_gains, gauge_means, per_window, server_prefix_hit_rate
from vllm_stress.core.metrics import in_window

REPLICA_LEVEL_COLUMNS = (  # a config's replicas rows
    "users",
    "replica",
    "running_mean",
    "waiting_mean",
    "request_share",
    "prefix_cache_hit_rate",
)


def replica_levels(
    replicas: pd.DataFrame | None, windows: pd.DataFrame, requests: pd.DataFrame | None = None
) -> pd.DataFrame:
    """Per level and replica: its mean running and waiting requests, its share of the requests finished in the window (the
    rows that name it when requests.csv does, else its vllm:request_success gained) and its prefix-cache hit rate
    (vllm:prefix_cache_hits / queries gained); no rows without replicas."""
    servers = dict(tuple(replicas.groupby("replica"))) if replicas is not None else {}
    named = requests[requests["replica"].fillna("") != ""] if requests is not None else None
    spread = dict(tuple(named.groupby("replica"))) if named is not None and not named.empty else {}
    if not servers and not spread:
        return pd.DataFrame(columns=list(REPLICA_LEVEL_COLUMNS))
    per_replica = [
        pd.DataFrame(
            {
                "users": windows["users"].to_numpy(),
                "replica": replica,
                "running_mean": gauge_means(servers.get(replica), windows, "running"),
                "waiting_mean": gauge_means(servers.get(replica), windows, "waiting"),
                "finished": (
                    rows_ended(spread.get(replica), windows)
                    if spread
                    else counter_gains(servers.get(replica), windows, "request_success")
                ),
                "prefix_cache_hit_rate": server_prefix_hit_rate(servers.get(replica), windows),
            }
        )
        for replica in sorted(map(str, set(servers) | set(spread)))
    ]
    levels = pd.concat(per_replica, ignore_index=True)
    levels["request_share"] = levels["finished"] / levels.groupby("users")["finished"].transform("sum")
    return levels[list(REPLICA_LEVEL_COLUMNS)]


def rows_ended(rows: pd.DataFrame | None, windows: pd.DataFrame) -> np.ndarray:
    """The requests.csv rows that ended in each window (0 without rows)."""
    if rows is None:
        return np.zeros(len(windows))
    ends = rows["end_time"].to_numpy(dtype=float)
    return per_window(windows, lambda a, b: float(np.count_nonzero(in_window(ends, a, b))))
