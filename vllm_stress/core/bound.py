"""Why a level's throughput is what it is — server- (batch-, memory-), client-, client/gateway- or frontend-bound —
from the server's own histograms and gauges over the level's window and its load generators' health, each figure
with the margin its window allows; and whether a saturated server's running batch sat at its max_num_seqs. One rule
for the report and the live dashboard; docs/concepts/bounds.md explains it."""

from __future__ import annotations

import argparse
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
BATCH_FULL_SHARE = 0.95  # a running batch at this share of max_num_seqs (or of its plateau) is at its cap, or
# within one sequence of it for a small cap: a finished sequence's slot stays empty until the next step admits one
KV_FULL_SHARE = 0.9  # a KV cache this full (vllm:kv_cache_usage_perc) holds no more sequences
DEFERRED_MIN = 0.5  # requests waiting for a LoRA slot on average: the level is adapter-bound
# level fields from the server's LoRA gauges (their means over the level's scrapes) -> server_metrics.csv's columns
LORA_LEVEL_FIELDS = {
    "server_lora_adapters_mean": "lora_running",  # adapters with a request in flight (vllm:lora_requests_info)
    "server_max_lora": "max_lora",  # the batch's adapter slots (its max_lora label)
    "server_deferred_mean": "waiting_deferred",  # waiting requests the scheduler skipped (LoRA slots, KV transfers)
}
# What the server held over a window (level fields, see vllm_stress.analysis.levels.LEVEL_FIELDS)
SERVER_LOAD_FIELDS = (
    "server_e2e_mean_s",
    "server_in_system_mean",
    "server_waiting_mean",
    "server_http_held_mean",
    "server_frontend_cpu_percent",
    "server_running_mean",
    "server_load_margin",
)

Row = Mapping[str, Any]  # a row of server_metrics.csv or client_health.csv, numbers as floats (NaN when empty)


def total(values: list[float]) -> float:
    """The sum of the numbers that are not NaN, NaN when there are none."""
    present = [value for value in values if not math.isnan(value)]
    return math.fsum(present) if present else math.nan


def server_load(scrapes: Sequence[Row], start: float, end: float) -> dict[str, float]:
    """What the server held between ``start`` and ``end`` by Little's law on its own histograms (``scrapes``:
    server_metrics.csv rows sorted by time, each holding the observations since the previous scrape; only the
    intervals wholly inside the window count): the mean e2e, the requests in its engine, waiting, in its HTTP layer,
    its API server's CPU, the mean of its running gauge, and the margin of those Little's-law counts
    (load_margin); NaN where nothing says."""
    inside = intervals_inside(scrapes, start, end, "e2e")
    span = math.fsum(scrape["time"] - previous["time"] for previous, scrape in inside)
    count = total([scrape["e2e_count"] for _, scrape in inside])
    running = gauge_mean(scrapes, "running", start, end)
    if not span > 0 or not count > 0:  # the gauge's samples need no interval
        return {**dict.fromkeys(SERVER_LOAD_FIELDS, math.nan), "server_running_mean": running}
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
                running,
                load_margin(e2e / count, span),
            ),
            strict=True,
        )
    )


def intervals_inside(scrapes: Sequence[Row], start: float, end: float, histogram: str) -> list[tuple[Row, Row]]:
    """The scrape intervals wholly inside ``start``..``end`` (each as its two scrapes) whose closing scrape has the
    ``histogram``'s observations: what a window's histogram figures sum over, as a request cut by an edge cannot be
    told apart within its interval."""
    return [
        (previous, scrape)
        for previous, scrape in zip(scrapes, scrapes[1:], strict=False)
        if start <= previous["time"] and scrape["time"] <= end and not math.isnan(scrape[f"{histogram}_count"])
    ]


def histogram_mean(scrapes: Sequence[Row], histogram: str, start: float, end: float) -> float:
    """The mean observation of the server histogram ``histogram`` (a prefix of schema.SERVER_HISTOGRAMS) over the
    intervals wholly inside the window; NaN without an observation."""
    inside = intervals_inside(scrapes, start, end, histogram)
    count = total([scrape[f"{histogram}_count"] for _, scrape in inside])
    return total([scrape[f"{histogram}_sum_s"] for _, scrape in inside]) / count if count > 0 else math.nan


def load_margin(e2e_mean_s: float, span_s: float) -> float:
    """The relative margin of a Little's-law count (the e2e of the requests that ended in ``span_s`` / ``span_s``):
    a request cut by either edge of the window counts whole or not at all, about one lifetime of every request held
    at each edge, so the count is known to e2e mean / span of itself at best (1 or more: not at all)."""
    return e2e_mean_s / span_s


def mean(values: list[float]) -> float:
    """The mean of the numbers that are not NaN, NaN when there are none."""
    present = [value for value in values if not math.isnan(value)]
    return math.fsum(present) / len(present) if present else math.nan


def launch_max_num_seqs(meta: Mapping[str, Any]) -> int | None:
    """The server's max_num_seqs from run.json's server_launch command (vLLM's and the simulator's
    ``--max-num-seqs N``, or the simulator's ``--set max_num_seqs=N``), None when the run did not start the
    server or left it at the server's default."""
    command = [str(arg) for arg in (meta.get("server_launch") or {}).get("command") or []]
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    parser.add_argument("--max-num-seqs", type=int)
    parser.add_argument("--set", action="append", default=[])
    try:
        args, _ = parser.parse_known_args(command)
    except argparse.ArgumentError:  # a value that is not a number
        return None
    settings = {key.strip(): value.strip() for key, _, value in (item.partition("=") for item in args.set)}
    value = settings.get("max_num_seqs", "")
    return int(value) if value.isdigit() else args.max_num_seqs


def gauge_mean(scrapes: Sequence[Row], column: str, start: float, end: float) -> float:
    """The mean of server_metrics.csv's gauge ``column`` over the scrapes taken in ``[start, end)``
    (vllm_stress.core.metrics.in_window), NaN without one."""
    return mean([scrape.get(column, math.nan) for scrape in scrapes if in_window(scrape["time"], start, end)])


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
    ``client_loop_lag_max_ms``, ``client_read_behind_p99_ms`` with ``e2e_p50_s``, ``schedule_lag_p99_s``,
    ``concurrency_mean``, ``server_kv_cache_usage_mean``, ``server_preemptions``, ``max_num_seqs``; a missing one
    counts as unknown): "server-bound: waiting requests" (or "batch-bound (...)", "memory-bound (...)" when the running
    batch or the KV cache says why they wait), "client-bound (...)", "client/gateway-bound (...)",
    "gateway/frontend-bound (...)", "frontend-bound (...)", or "" when nothing says. A shortfall of the server's
    Little's-law counts is judged only beyond their margin (server_load_margin), and the load generators are named only
    when their own health (CPU and loop lag under the limits, and in flight at least UNDERLOADED_RATIO of the users
    where known) does not say they kept their users' requests out."""
    users = level["users"]
    held = level.get("server_in_system_mean", math.nan)
    http = level.get("server_http_held_mean", math.nan)
    frontend_cpu = level.get("server_frontend_cpu_percent", math.nan)
    waiting = level.get("server_waiting_mean", math.nan)
    margin = level.get("server_load_margin", math.nan)
    margin = 0.0 if math.isnan(margin) else margin  # figures written before the margin: judged as they were
    cpu_note = client_note(level)
    queue_share, before_share = ttft_share(level, "ttft_queue_p50_s"), ttft_share(level, "ttft_before_server_p50_s")
    queued = (
        queue_share >= QUEUE_TTFT_SHARE
        if not math.isnan(queue_share)
        else waiting * (1 - margin) >= max(1.0, QUEUED_SHARE * held)
    )
    if queued:
        what = (
            "waiting requests"
            if math.isnan(queue_share)
            else f"{queue_share * 100:.0f} % of TTFT waiting in the scheduler"
        )
        return queued_kind(level, what) + (f" ({cpu_note}: client timings inflated)" if cpu_note else "")
    open_loop = not math.isnan(level.get("schedule_lag_p99_s", math.nan))
    few = 0 if open_loop else UNDERLOADED_RATIO * users  # an open loop's users are only a pool
    in_flight = level.get("concurrency_mean", math.nan)
    cpu, lag = level.get("client_cpu_max_percent", math.nan), level.get("client_loop_lag_max_ms", math.nan)
    healthy = cpu < CLIENT_CPU_LIMIT_PERCENT and lag < CLIENT_LOOP_LAG_LIMIT_MS and not in_flight < few

    def short(value: float) -> bool:  # under ``few`` by more than the count's margin
        return value * (1 + margin) < few

    if (short(http) or short(held)) and frontend_cpu >= FRONTEND_CPU_LIMIT_PERCENT:
        kind, note = "frontend-bound", f"vLLM's API server process at {frontend_cpu:.0f} % CPU"
    elif short(http) and healthy and not cpu_note:
        kind = "gateway/frontend-bound"
        note = (
            f"vLLM's HTTP layer held {held_text(http, margin)} of {users:.0f}; the load generators at {cpu:.0f} % CPU, "
            f"{lag:.1f} ms loop lag"
        )
    elif short(http):
        kind, note = "client/gateway-bound", f"vLLM's HTTP layer held {held_text(http, margin)} of {users:.0f}"
    elif short(held) and not math.isnan(http):
        kind = "frontend-bound"
        note = f"vLLM's HTTP layer held {held_text(http, margin)} of {users:.0f}, its engine {held_text(held, margin)}"
    elif short(held):
        kind = "client/gateway- or frontend-bound"
        note = f"the server's engine held {held_text(held, margin)} of {users:.0f}; no HTTP-layer metrics to tell which"
    else:
        kind, note = "", ""
    if kind and not math.isnan(before_share):
        note += f"; {before_share * 100:.0f} % of TTFT before vLLM"
    if cpu_note:
        return f"client-bound ({'; '.join(filter(None, (cpu_note, note)))})"
    return f"{kind} ({note})" if kind else ""


def held_text(value: float, margin: float) -> str:
    """A Little's-law count with its margin when that is a request or more: "89 ± 36"."""
    spread = value * margin
    return f"{value:.0f} ± {spread:.0f}" if spread >= 0.5 else f"{value:.0f}"


def queued_kind(level: Row, what: str) -> str:
    """Why a level's requests waited in the server: "memory-bound: ..." when its KV cache was KV_FULL_SHARE full or it
    preempted, "batch-bound: max_num_seqs N reached (...)" when its running batch sat at BATCH_FULL_SHARE of the
    launch setting, else "server-bound: ``what``" (the step time: compute, or a cause the figures do not show)."""
    running = level.get("server_running_mean", math.nan)
    usage = level.get("server_kv_cache_usage_mean", math.nan)
    preempted = level.get("server_preemptions", math.nan)
    cap = level.get("max_num_seqs", math.nan)
    cache = f"the KV cache {usage * 100:.0f} % full" if not math.isnan(usage) else ""
    if usage >= KV_FULL_SHARE or preempted > 0:
        preemptions = f"{preempted:.0f} preemptions" if preempted > 0 else ""
        return f"memory-bound: {what} ({'; '.join(filter(None, (cache, preemptions)))})"
    if cap > 0 and at_cap(running, cap):
        waiting = level.get("server_waiting_mean", math.nan)
        figures = (f"{running:.0f} running", f"{waiting:.0f} waiting" if not math.isnan(waiting) else "", cache)
        return f"batch-bound: max_num_seqs {cap:.0f} reached ({', '.join(filter(None, figures))})"
    return adapter_note(level) or f"server-bound: {what}"


def adapter_note(level: Row) -> str:
    """ "adapter-bound: ..." when requests waited for a LoRA slot (DEFERRED_MIN deferred on average, with more
    adapters in flight than the batch's max_loras), else ""."""
    deferred = level.get("server_deferred_mean", math.nan)
    adapters = level.get("server_lora_adapters_mean", math.nan)
    slots = level.get("server_max_lora", math.nan)
    if not (deferred >= DEFERRED_MIN and adapters > slots):
        return ""
    return (
        f"adapter-bound: {deferred:.1f} requests waited for a LoRA slot ({adapters:.1f} adapters in flight, "
        f"max_loras {slots:.0f})"
    )


def at_cap(running: float, cap: float) -> bool:
    """Whether a running batch's mean ``running`` sits at ``cap``: BATCH_FULL_SHARE of it, or one sequence short."""
    return running >= cap - max(1.0, (1 - BATCH_FULL_SHARE) * cap)


def batch_note(batch: Mapping[str, float], max_num_seqs: int | None) -> str:
    """A batch_ceiling in words: "batch-bound: max_num_seqs 128 reached", or from the plateau without the launch
    settings, "batch-bound: the batch runs flat at 127 (max_num_seqs?)"."""
    what = f"max_num_seqs {max_num_seqs} reached" if max_num_seqs else f"the batch runs flat at {batch['ceiling']:.0f}"
    return f"batch-bound: {what}" + ("" if max_num_seqs else " (max_num_seqs?)")


def batch_ceiling(levels: Sequence[Row], saturation_users: int, max_num_seqs: int | None) -> dict[str, float] | None:
    """Whether the saturated levels (``levels`` with ``users`` from ``saturation_users`` on, sorted by users) ran their
    batch flat at a ceiling with requests waiting and the KV cache under KV_FULL_SHARE: the ceiling (``max_num_seqs``
    when the launch settings name it and every saturated level ran at it (at_cap), else the highest running mean
    when two or more levels ran at it), the running means' range and the waiting
    (``running_min``, ``running_max``, ``waiting_min``, ``waiting_max``); None when they did not, or nothing says."""
    saturated = [level for level in levels if level["users"] >= saturation_users]
    running = [float(level.get("server_running_mean", math.nan)) for level in saturated]
    waiting = [float(level.get("server_waiting_mean", math.nan)) for level in saturated]
    usage = [float(level.get("server_kv_cache_usage_mean", math.nan)) for level in saturated]
    if not running or any(math.isnan(value) for value in running + waiting[-1:]):
        return None
    if not waiting[-1] >= QUEUE_MIN_WAITING or any(value >= KV_FULL_SHARE for value in usage):
        return None
    if max_num_seqs:
        ceiling = float(max_num_seqs) if at_cap(min(running), max_num_seqs) else math.nan
    else:
        flat = len(running) >= 2 and at_cap(min(running), max(running))
        ceiling = max(running) if flat else math.nan
    if math.isnan(ceiling):
        return None
    known = [value for value in waiting if not math.isnan(value)]
    return {
        "ceiling": ceiling,
        "running_min": min(running),
        "running_max": max(running),
        "waiting_min": min(known),
        "waiting_max": max(known),
    }
