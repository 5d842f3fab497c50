"""A disaggregated prefill/decode fleet at each level (replicas given roles with ``--server-metrics-url ROLE=URL``,
run.json ``replica_roles``): the prefill and decode instances' load, the KV transfers' count, time and volume from
vLLM's NixlConnector series, and the client's mean TTFT split into the prefill instance, the transfer and the first
decode step (vllm_stress.core.pdbound.PD_FIELDS; docs/guides/disaggregated.md)."""

from __future__ import annotations

import math
from typing import Any, cast

import numpy as np
import pandas as pd

from vllm_stress.analysis.io.load import Run
from vllm_stress.analysis.measures import histogram_mean
from vllm_stress.core.metrics import in_window
from vllm_stress.core.pdbound import PD_FIELDS, pd_notes

GB = 1e9


def role_rows(run: Run, role: str) -> pd.DataFrame | None:
    """The server_metrics.csv rows of the replicas ``replica_roles`` names ``role`` (None when none is)."""
    roles = run.meta.get("replica_roles") or {}
    replicas = run.tables.get("server_replicas")
    names = {replica for replica, named in roles.items() if named == role}
    if replicas is None or not names:
        return None
    return replicas[replicas["replica"].isin(names)].sort_values("time")


def window_sum(rows: pd.DataFrame | None, start: float, end: float, column: str) -> float:
    """The sum of ``column`` over the scrapes in the window (each holds what happened since the one before)."""
    if rows is None:
        return math.nan
    values = rows.loc[in_window(rows["time"], start, end), column].astype(float)
    return float(values.sum()) if values.notna().any() else math.nan


def gauge_sum(rows: pd.DataFrame | None, start: float, end: float, column: str) -> float:
    """Each replica's mean of the gauge ``column`` over the scrapes in the window, summed over the replicas."""
    if rows is None:
        return math.nan
    inside = rows[in_window(rows["time"], start, end)]
    return float(inside.groupby("replica")[column].mean().sum(min_count=1)) if len(inside) else math.nan


def counter_gain(rows: pd.DataFrame | None, start: float, end: float, column: str) -> float:
    """What the cumulative ``column`` gained over the window, each replica's last scrape in it less its scrape
    before, summed over the replicas."""
    if rows is None:
        return math.nan
    gains = []
    for _, replica in rows.groupby("replica"):
        times, values = replica[["time", column]].to_numpy(float).T
        inside = np.flatnonzero(in_window(times, start, end))
        if inside.size and inside[0]:
            gains.append(values[inside[-1]] - values[inside[0] - 1])
    return math.fsum(gains) if gains else math.nan


def level_fields(prefill: pd.DataFrame | None, decode: pd.DataFrame | None, start: float, end: float) -> list[float]:
    """PD_FIELDS of one window, the client TTFT mean and the split's ratio left NaN (``pd_levels`` sets them)."""
    transfers = window_sum(decode, start, end, "kv_transfer_count")
    transfer_s = histogram_mean(decode, start, end, "kv_transfer")
    gigabytes = counter_gain(decode, start, end, "kv_transfer_bytes") / GB
    decode_ttft = histogram_mean(decode, start, end, "ttft")
    prefill_s = histogram_mean(prefill, start, end, "http")
    if math.isnan(prefill_s):  # a server without HTTP-layer metrics: its engine's time
        prefill_s = histogram_mean(prefill, start, end, "e2e")
    return [
        gauge_sum(prefill, start, end, "running"),
        gauge_sum(prefill, start, end, "waiting"),
        gauge_sum(decode, start, end, "running"),
        gauge_sum(decode, start, end, "waiting"),
        transfers,
        gigabytes,
        gigabytes * 8 / (end - start),
        math.nan,
        prefill_s,
        transfer_s,
        decode_ttft - (0.0 if math.isnan(transfer_s) else transfer_s),
        math.nan,
    ]


def pd_levels(run: Run, windows: pd.DataFrame, measured: pd.DataFrame) -> pd.DataFrame:
    """PD_FIELDS per level (index: users), NaN throughout when the run named no prefill or decode replica."""
    prefill, decode = role_rows(run, "prefill"), role_rows(run, "decode")
    fields = list(PD_FIELDS)
    if prefill is None and decode is None:
        return pd.DataFrame(math.nan, index=windows["users"], columns=fields)
    rows = [level_fields(prefill, decode, a, b) for a, b in zip(windows["start"], windows["end"], strict=True)]
    levels = pd.DataFrame(rows, index=windows["users"], columns=fields, dtype=float)
    levels["ttft_client_mean_s"] = measured.groupby("users")["ttft_s"].mean().reindex(levels.index)
    parts = levels[["ttft_prefill_s", "ttft_transfer_s", "ttft_first_decode_s"]].sum(axis=1, min_count=3)
    levels["ttft_split_ratio"] = parts / levels["ttft_client_mean_s"]
    return levels


def has_roles(levels: pd.DataFrame) -> bool:
    """Whether the levels have a TTFT split: the run named prefill or decode replicas."""
    return "ttft_client_mean_s" in levels and bool(levels["ttft_client_mean_s"].notna().any())


def pd_bounds(levels: pd.DataFrame) -> pd.Series:
    """Each level's bound led by its P/D note (vllm_stress.core.pdbound), as it was where the note is empty; the
    router's notes are left out: a prefill and a decode instance are no replicas of one another."""
    notes = pd_notes(cast(list[dict[str, Any]], levels.to_dict("records")))  # the stubs' keys are Hashable
    return pd.Series(
        ["; ".join(filter(None, (note, verdict))) for note, verdict in zip(notes, levels["bound"], strict=True)],
        index=levels.index,
    )
