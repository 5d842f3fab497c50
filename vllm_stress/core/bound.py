"""Why a level's throughput is what it is — server-, client-, client/gateway- or frontend-bound — from the server's
own histograms over the level's window and its load generators' health. One rule for the report and the live
dashboard; docs/concepts/bounds.md explains it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from vllm_stress.core.metrics import health_samples, in_window
from vllm_stress.core.schema import CLIENT_CPU_LIMIT_PERCENT, CLIENT_LOOP_LAG_LIMIT_MS, CLIENT_READ_BEHIND_SHARE

UNDERLOADED_RATIO = 0.9  # the server (or its HTTP layer) held under this share of the users
QUEUED_SHARE = 0.1  # requests waited this share of their time in the server
FRONTEND_CPU_LIMIT_PERCENT = 90  # vLLM's API server process at this much of a core
ROUTER_SHARE_RATIO = 1.5  # a replica finished this many times its even share (1 / replicas) of the requests
QUEUE_MIN_WAITING = 1.0  # a replica whose waiting queue held this many requests on average queues
IDLE_RUNNING_RATIO = 0.5  # ...while another, with no queue, ran at most this share of its running requests
QUEUE_TTFT_SHARE = 0.5  # with the server's spans: the median request spent this share of its TTFT in vLLM's queue
SCHEDULE_LAG_LIMIT_S = 1.0  # open loop / trace replay: p99 of how late arrivals were sent
# What the server held over a window (level fields, see vllm_stress.analysis.levels.LEVEL_FIELDS)
SERVER_LOAD_FIELDS = (
    "server_e2e_mean_s",
    "server_in_system_mean",
    "server_waiting_mean",
    "server_http_held_mean",
    "server_frontend_cpu_percent",
)

Row = Mapping[str, Any]  # a row of server_metrics.csv or client_health.csv, numbers as floats (NaN when empty)


def total(values: list[float]) -> float:
    """The sum of the numbers that are not NaN, NaN when there are none."""
    present = [value for value in values if not math.isnan(value)]
    return math.fsum(present) if present else math.nan


def server_load(scrapes: Sequence[Row], start: float, end: float) -> dict[str, float]:
    """What the server held over ``[start, end)`` by Little's law on its own histograms (``scrapes``:
    server_metrics.csv rows sorted by time, each holding the observations since the previous scrape, counted with
    the scrapes in the window: vllm_stress.core.metrics.in_window): the mean e2e,
    the requests in its engine, waiting, in its HTTP layer, and its API server's CPU; NaN where nothing says."""
    inside = [
        (previous, scrape)
        for previous, scrape in zip(scrapes, scrapes[1:], strict=False)
        if in_window(scrape["time"], start, end) and not math.isnan(scrape["e2e_count"])
    ]
    span = math.fsum(scrape["time"] - previous["time"] for previous, scrape in inside)
    count = total([scrape["e2e_count"] for _, scrape in inside])
    if not span > 0 or not count > 0:
        return dict.fromkeys(SERVER_LOAD_FIELDS, math.nan)
    e2e = total([scrape["e2e_sum_s"] for _, scrape in inside])
    has_http = any(not math.isnan(scrape["http_count"]) for _, scrape in inside)
    cpu = total([scrape["frontend_cpu_s"] - previous["frontend_cpu_s"] for previous, scrape in inside])
    return dict(
        zip(
            SERVER_LOAD_FIELDS,
            (
                e2e / count,
                e2e / span,
                total([scrape["queue_sum_s"] for _, scrape in inside]) / span,
                total([scrape["http_sum_s"] for _, scrape in inside]) / span if has_http else math.nan,
                cpu / span * 100,
            ),
            strict=True,
        )
    )


def health_max(samples: Sequence[Row], column: str, start: float, end: float) -> float:
    """The highest ``column`` of client_health.csv (``samples`` sorted by time) over ``[start, end)``: of every
    sample whose span overlaps it (vllm_stress.core.metrics.health_samples)."""
    values = [sample[column] for sample in health_samples(samples, start, end) if not math.isnan(sample[column])]
    return max(values, default=math.nan)


def router_note(replicas: Sequence[Mapping[str, Any]]) -> str:
    """What says the router, not the replicas, set the pace ("" when nothing does), from each of two or more
    replicas' level row (``replica``, ``request_share``: its share of the requests finished, ``running_mean``,
    ``waiting_mean``): one finished ROUTER_SHARE_RATIO times its even share, or one queued while another ran at
    most IDLE_RUNNING_RATIO of its requests with no queue."""
    if len(replicas) < 2:
        return ""
    notes = []
    shared = [row for row in replicas if not math.isnan(row["request_share"])]
    busiest = max(shared, key=lambda row: row["request_share"], default=None)
    if busiest and len(shared) > 1 and busiest["request_share"] >= ROUTER_SHARE_RATIO / len(shared):
        notes.append(
            f"router-bound: replica {busiest['replica']} held {busiest['request_share'] * 100:.0f} % of the requests"
        )
    queued = max(replicas, key=lambda row: -math.inf if math.isnan(row["waiting_mean"]) else row["waiting_mean"])
    idle = [
        row
        for row in replicas
        if row["waiting_mean"] < QUEUE_MIN_WAITING
        and row["running_mean"] <= IDLE_RUNNING_RATIO * queued["running_mean"]
    ]
    if queued["waiting_mean"] >= QUEUE_MIN_WAITING and idle:
        notes.append(
            f"queue on one replica while others idle: replica {queued['replica']} had {queued['waiting_mean']:.1f} "
            f"requests waiting while replica {idle[0]['replica']} ran {idle[0]['running_mean']:.1f} with none"
        )
    return "; ".join(notes)


def client_note(level: Row) -> str:
    """What says the load generators, not the server, set the pace ("" when nothing does)."""
    cpu = level.get("client_cpu_max_percent", math.nan)
    lag = level.get("client_loop_lag_max_ms", math.nan)
    schedule_lag = level.get("schedule_lag_p99_s", math.nan)
    notes = (
        f"a load generator at {cpu:.0f} % CPU" if cpu >= CLIENT_CPU_LIMIT_PERCENT else "",
        f"a load generator's event loop {lag:.0f} ms late" if lag >= CLIENT_LOOP_LAG_LIMIT_MS else "",
        read_behind_note(level),
        f"arrivals were sent {schedule_lag:.1f} s late (p99): it did not keep up with the schedule"
        if schedule_lag >= SCHEDULE_LAG_LIMIT_S
        else "",
    )
    return "; ".join(filter(None, notes))


def ttft_share(level: Row, part: str) -> float:
    """A level's TTFT part (a p50 of the split from the server's spans) / its client TTFT p50; NaN when unknown."""
    value, ttft = level.get(part), level.get("ttft_p50_s")
    if value is None or ttft is None or math.isnan(value) or not ttft > 0:
        return math.nan
    return float(value / ttft)


def read_behind_note(level: Row) -> str:
    """A load generator that read its chunks late enough to send late: its read-behind p99 reached
    CLIENT_READ_BEHIND_SHARE of the level's e2e p50, and CLIENT_LOOP_LAG_LIMIT_MS (a few ms of lateness on a busy
    machine is no finding, however short the requests) ("" otherwise, or when either is unknown)."""
    behind_s = level.get("client_read_behind_p99_ms", math.nan) / 1000
    e2e = level.get("e2e_p50_s", math.nan)
    if not behind_s >= max(CLIENT_READ_BEHIND_SHARE * e2e, CLIENT_LOOP_LAG_LIMIT_MS / 1000):
        return ""
    return (
        f"a load generator read its chunks {behind_s * 1000:.0f} ms late (p99, {behind_s / e2e:.0%} of the e2e "
        "p50): its users sent their next requests as late"
    )


def level_bound(level: Row) -> str:
    """The bound of a level from its fields (``users``, SERVER_LOAD_FIELDS, ``client_cpu_max_percent``,
    ``client_loop_lag_max_ms``, ``client_read_behind_p99_ms`` with ``e2e_p50_s``, ``schedule_lag_p99_s``; a missing one counts as unknown): "server-bound: waiting
    requests", "client-bound (...)", "client/gateway-bound (...)", "frontend-bound (...)", or "" when nothing says."""
    users = level["users"]
    held = level.get("server_in_system_mean", math.nan)
    http = level.get("server_http_held_mean", math.nan)
    frontend_cpu = level.get("server_frontend_cpu_percent", math.nan)
    waiting = level.get("server_waiting_mean", math.nan)
    cpu_note = client_note(level)
    queue_share, before_share = ttft_share(level, "ttft_queue_p50_s"), ttft_share(level, "ttft_before_server_p50_s")
    queued = (
        queue_share >= QUEUE_TTFT_SHARE if not math.isnan(queue_share) else waiting >= max(1.0, QUEUED_SHARE * held)
    )
    if queued:
        what = (
            "waiting requests"
            if math.isnan(queue_share)
            else f"{queue_share * 100:.0f} % of TTFT waiting in the scheduler"
        )
        return f"server-bound: {what}" + (f" ({cpu_note}: client timings inflated)" if cpu_note else "")
    open_loop = not math.isnan(level.get("schedule_lag_p99_s", math.nan))
    few = 0 if open_loop else UNDERLOADED_RATIO * users  # an open loop's users are only a pool
    if (http < few or held < few) and frontend_cpu >= FRONTEND_CPU_LIMIT_PERCENT:
        kind, note = "frontend-bound", f"vLLM's API server process at {frontend_cpu:.0f} % CPU"
    elif http < few:
        kind, note = "client/gateway-bound", f"vLLM's HTTP layer held {http:.0f} of {users:.0f}"
    elif held < few and not math.isnan(http):
        kind, note = "frontend-bound", f"vLLM's HTTP layer held {http:.0f} of {users:.0f}, its engine {held:.0f}"
    elif held < few:
        kind = "client/gateway- or frontend-bound"
        note = f"the server's engine held {held:.0f} of {users:.0f}; no HTTP-layer metrics to tell which"
    else:
        kind, note = "", ""
    if kind and not math.isnan(before_share):
        note += f"; {before_share * 100:.0f} % of TTFT before vLLM"
    if cpu_note:
        return f"client-bound ({'; '.join(filter(None, (cpu_note, note)))})"
    return f"{kind} ({note})" if kind else ""
