"""The report's scaling table, from a run's replicas.csv (vllm_stress.master.replicaset): the replicas over time, each
scale-up's lag from the queue's growth to the new replica serving, the requests sent meanwhile (they met the queue)
and those of them that failed, and the replica-hours with their cost (docs/guides/elastic-fleets.md)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pandas as pd

from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.capacity import SECONDS_PER_HOUR
from vllm_stress.core.metrics import percentile
from vllm_stress.core.numbers import count, dollars, seconds
from vllm_stress.core.schema import ABORTED

SERIES_COLUMNS = ("at_s", "replicas", "running", "waiting")  # one row per look, seconds since the first look


def replica_series(table: pd.DataFrame) -> pd.DataFrame:
    """Per look: seconds since the first, the replicas up, and their running and waiting requests summed."""
    looks = table.assign(up=table["up"].fillna(0).astype(int))
    up = looks[looks["up"] == 1]
    series = pd.DataFrame({"time": sorted(looks["time"].unique())}).set_index("time")
    series["replicas"] = up.groupby("time").size()
    series["running"] = up.groupby("time")["running"].sum()
    series["waiting"] = up.groupby("time")["waiting"].sum()
    series = series.fillna(0).reset_index()
    series.insert(0, "at_s", series["time"] - series["time"].iloc[0])
    return series


def joins(table: pd.DataFrame) -> list[tuple[str, float]]:
    """(replica, time) of each replica coming up after the first look: down (or unknown) at the look before."""
    first = table["time"].min()
    found = []
    for replica, looks in table.sort_values("time").groupby("replica"):
        up = looks["up"].fillna(0).astype(int).to_numpy()
        times = looks["time"].to_numpy(float)
        was_down = [i > 0 and up[i - 1] == 0 or i == 0 and times[0] > first for i in range(len(up))]
        rises = [i for i in range(len(up)) if up[i] == 1 and was_down[i]]
        found += [(str(replica), float(times[i])) for i in rises]
    return sorted(found, key=lambda join: join[1])


def queue_growth(series: pd.DataFrame, before: float) -> float:
    """When the queue that a replica coming up at ``before`` answered began to grow: the first look with requests
    waiting after the last look before ``before`` with none (the first look when none had none); NaN when the looks
    saw no request waiting before it (the autoscaler saw a queue between two looks, or scaled on something else)."""
    earlier = series[series["time"] < before]
    empty = earlier[earlier["waiting"] <= 0]
    after = earlier[earlier["time"] > empty["time"].max()] if not empty.empty else earlier
    return float(after["time"].min()) if not after.empty else math.nan


def scale_up(
    table: pd.DataFrame, series: pd.DataFrame, requests: pd.DataFrame, replica: str, up_at: float
) -> dict[str, Any]:
    """One replica's scale-up: when the queue grew, when it came up and first ran a request, the lag between, and the
    requests sent in that lag (the queue's), those that failed, their TTFT p99 and the fleet's most waiting."""
    origin = float(series["time"].iloc[0])
    mine = table[(table["replica"] == replica) & (table["time"] >= up_at) & (table["running"].fillna(0) > 0)]
    serving_at = float(mine["time"].min()) if not mine.empty else math.nan
    grew_at = queue_growth(series, up_at)
    end = float(series["time"].max()) if math.isnan(serving_at) else serving_at
    sent = requests[(requests["start_time"] >= grew_at) & (requests["start_time"] < end)]  # none without a queue
    failed = sent[~sent["ok"] & (sent["error"].fillna("") != ABORTED)]
    queue = series[(series["time"] >= grew_at) & (series["time"] <= end)]["waiting"]
    return {
        "replica": replica,
        "queue_grew_s": grew_at - origin,
        "up_s": up_at - origin,
        "serving_s": serving_at - origin,
        "lag_s": serving_at - grew_at,
        "requests": len(sent),
        "failed": len(failed),
        "ttft_p99_s": percentile(sent.loc[sent["ok"], "ttft_s"].to_numpy(float), 99),
        "waiting_peak": float(queue.max()) if not queue.empty else np.nan,
    }


def replica_hours(series: pd.DataFrame) -> float:
    """The replicas up integrated over the looks (each interval counts those up at its start), in hours."""
    gaps = np.diff(series["time"].to_numpy(float))
    return float(np.sum(series["replicas"].to_numpy(float)[:-1] * gaps) / SECONDS_PER_HOUR)


def scaling(
    run_path: str, table: pd.DataFrame, requests: pd.DataFrame, gpus: int | None, gpu_hour_price: float | None
) -> dict[str, Any]:
    """A run's scaling summary: its series, its scale-ups, leaves, replica-hours and, with GPUs per replica and a
    price, their cost."""
    series = replica_series(table)
    ups = [scale_up(table, series, requests, replica, at) for replica, at in joins(table)]
    changes = series[series["replicas"].diff().fillna(1) != 0]
    hours = replica_hours(series)
    return {
        "run": run_path,
        "series": series[list(SERIES_COLUMNS)].to_numpy(float).round(3).tolist(),
        "changes": changes[["at_s", "replicas", "waiting"]].to_numpy(float).round(3).tolist(),
        "scale_ups": ups,
        "leaves": int((series["replicas"].diff() < 0).sum()),
        "replica_hours": hours,
        "cost_usd": hours * gpus * gpu_hour_price if gpus and gpu_hour_price else None,
    }


def scaling_blocks(label: str, runs: list[dict[str, Any]]) -> list[Block]:
    """The scaling table of each run of a config that tracked its replica set; [] when none did."""
    blocks: list[Block] = []
    for run in runs:
        cost = f", {dollars(run['cost_usd'])} at the GPU-hour price" if run["cost_usd"] is not None else ""
        text = (
            f"Scaling of {label} ({run['run']}): {len(run['scale_ups'])} scale-ups, {run['leaves']} replica counts "
            f"lowered, {count(run['replica_hours'], 4)} replica-hours{cost}. A scale-up's lag runs from the look "
            "where requests began to wait to the first look where the new replica runs one; the requests sent "
            "meanwhile met that queue."
        )
        changes = [[seconds(at), str(int(up)), count(waiting, 0)] for at, up, waiting in run["changes"]]
        ups = [
            [
                up["replica"],
                seconds(up["queue_grew_s"]),
                seconds(up["up_s"]),
                seconds(up["serving_s"]),
                seconds(up["lag_s"]),
                str(up["requests"]),
                str(up["failed"]),
                seconds(up["ttft_p99_s"]),
                count(up["waiting_peak"], 0),
            ]
            for up in run["scale_ups"]
        ]
        blocks += [Heading(f"Scaling: {label}"), Paragraph(text)]
        blocks.append(Table(["At", "Replicas up", "Waiting"], changes))
        if ups:
            headers = ["Replica", "Queue grew", "Up", "Serving", "Lag", "Sent meanwhile", "Failed", "TTFT p99"]
            blocks.append(Table([*headers, "Waiting peak"], ups))
    return blocks
