"""Connection churn in the analysis: the connections each level's requests opened per second and how long they took
to open (the rows' connect_s), and, where the run churned them, the server's HTTP layer as the level's bound
(docs/guides/stress.md, "Connection churn")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import Column, Config, ConfigInput, LevelInput
from vllm_stress.analysis.measures import percentiles_by_level
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.metrics import in_window
from vllm_stress.core.numbers import formatted, milliseconds
from vllm_stress.core.schema import POOLED

FIELDS = {
    "connections_per_s": "connections the level's requests opened (rows with connect_s) among those sent in the "
    "window / window_s",
    "connect_p50_s": "the median time those connections took to open: TCP connect, and TLS handshake to an https:// "
    "target",
    "connect_p99_s": "their 99th percentile",
}
CHURN_SHARE = 0.5  # a level churns when it opened a connection for at least this share of its requests
# core.bound's verdicts that say the server's HTTP layer (or what is in front of it) held fewer than the users
HTTP_SHORT_KINDS = (
    "gateway/frontend-bound",
    "client/gateway-bound",
    "frontend-bound",
    "client/gateway- or frontend-bound",
)


def level_fields(level: LevelInput) -> pd.DataFrame:
    """Connections opened per second and their connect times' p50 and p99, per level (NaN before format 5)."""
    index = level.base.index
    fields = pd.DataFrame(np.nan, index=index, columns=list(FIELDS))
    if "connect_s" not in level.rows:
        return fields
    opened = sent_in_windows(level.rows, level.windows)
    opened = opened[opened["connect_s"].notna()]
    windows = level.windows.set_index("users")
    window_s = (windows["end"] - windows["start"]).reindex(index)
    fields["connections_per_s"] = opened.groupby("users").size().reindex(index, fill_value=0) / window_s
    times = percentiles_by_level(opened, {"connect": "connect_s"}, (50, 99))
    fields[["connect_p50_s", "connect_p99_s"]] = times.reindex(index)
    return fields


def sent_in_windows(rows: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """The rows of each level sent inside its window."""
    start = rows["users"].map(windows.set_index("users")["start"])
    end = rows["users"].map(windows.set_index("users")["end"])
    sent: pd.DataFrame = rows[in_window(rows["start_time"], start, end)]
    return sent


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``connections``: the first run's --connections (run.json; absent before format 5: pooled)."""
    modes = [run.run.meta.get("connections") for run in config.runs]
    return {"connections": next((mode for mode in modes if mode), POOLED)}


def used(config: Config) -> bool:
    return bool(config.get("connections", POOLED) != POOLED)


def churns(level: Mapping[str, Any] | pd.Series) -> bool:
    """Whether the level opened a connection for at least CHURN_SHARE of its requests."""
    rate, requests = level.get("connections_per_s", np.nan), level.get("requests_per_s", np.nan)
    return bool(rate > 0 and requests > 0 and rate >= CHURN_SHARE * requests)


def bounds(levels: pd.DataFrame) -> pd.Series | None:
    """Where a churning level's verdict says the server's HTTP layer held fewer than its users, that layer is the
    bound: "HTTP-layer-bound (N new connections/s; the verdict)"; None when no level is."""
    if "connections_per_s" not in levels or "bound" not in levels:
        return None
    verdicts = levels.apply(http_bound, axis=1).astype(str)
    return verdicts if (verdicts != levels["bound"]).any() else None


def http_bound(level: pd.Series) -> str:
    verdict = str(level["bound"])
    if not churns(level) or verdict.split(" (")[0] not in HTTP_SHORT_KINDS:
        return verdict
    return f"HTTP-layer-bound ({level['connections_per_s']:.1f} new connections/s; {verdict})"


def columns(config: Config) -> list[Column]:
    return [Column("new conn/s", lambda level: formatted(level.get("connections_per_s"), "{:.1f}".format))]


def overview(label: str, config: Config) -> list[str]:
    return [f"In {label}, the users' connections were {config['connections']} (--connections)."]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    rows = [
        [
            str(level["users"]),
            formatted(level.get("requests_per_s"), "{:.1f}".format),
            formatted(level.get("connections_per_s"), "{:.1f}".format),
            milliseconds(level.get("connect_p50_s")),
            milliseconds(level.get("connect_p99_s")),
        ]
        for level in config["levels"]
    ]
    note = (
        f"Connections {config['connections']}: each new one costs the server an accept (and a TLS handshake to an "
        "https:// target) before its request reaches its HTTP layer. A level whose verdict says that layer held "
        "fewer requests than the users, while most requests opened a connection, is HTTP-layer-bound."
    )
    headers = ["users", "requests/s", "new connections/s", "connect p50", "connect p99"]
    return [Heading(f"Connection churn: {label}"), Paragraph(note), Table(headers, rows)]
