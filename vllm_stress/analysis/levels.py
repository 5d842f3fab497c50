"""Per-level windows and the statistics of one run in each: every level field (``LEVEL_FIELDS``: the base profile's
here, each capability's from its module in vllm_stress.analysis.features), latency percentiles and the per-second
timeline, from the measures of vllm_stress.analysis.measures (docs/concepts/analysis.md)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import LevelInput, features, level_fields
from vllm_stress.analysis.io.load import AnalysisError, Run
from vllm_stress.analysis.measures import (
    LATENCY_METRICS,
    PERCENTILES,
    classify,
    counter_gains,
    ended_in_windows,
    gauge_means,
    per_window,
    percentiles_by_level,
    records,
    token_times,
    tokens_in_windows,
)
from vllm_stress.core import bound, steady
from vllm_stress.core.metrics import bucket_percentile, in_window
from vllm_stress.core.metrics import mean_in_flight as in_flight_mean
from vllm_stress.core.schema import LEVELS_FILE, REQUESTS_FILE

LEVEL_CLOCK_SLACK_S = 1.0  # worker rows of a new level may start slightly before the master wrote the last hold_end
GPU_LOAD_FIELDS = ("gpu_power_w", "gpu_utilization_percent")  # per run, from gpu_metrics.csv
# --gpu-hour-price: throughput field -> the level field of what a million of its tokens cost
COST_FIELDS = {"output_tokens_per_s": "usd_per_m_output_tokens", "total_tokens_per_s": "usd_per_m_total_tokens"}

BASE_FIELDS = {  # the plain profile's fields; each capability's come from its analysis module
    "users": "target concurrency (Locust users) of the level",
    "window_s": "length of the steady-state window, seconds",
    "steady": "the window is a steady state (vllm_stress.core.steady: enough request lifetimes, halves that agree); only "
    "steady levels can be the peak, the saturation point, the knee or a recommendation",
    "steady_reason": "why the level is steady or not, in one line",
    "lifetimes": "window_s / the e2e p50 of the level's measured requests: how many request lifetimes it holds",
    "hold_needed_s": "the shortest hold that can be steady at this e2e p50 (after a warm-up of one lifetime)",
    "requests": "requests of the level that ended in the window, successes and failures (aborted and cancelled ones "
    "apart)",
    "failures": "of those, the failed ones (what the server or the network did wrong)",
    "aborted": "requests of the level ended in the window because the run stopped its users mid-stream: neither "
    "successes nor failures",
    "off_target": "successful requests whose usage differs from their token targets (count_mismatch) or that the "
    "server aborted (finish_reason abort): counted, but left out of every latency percentile",
    "success_rate": "1 - failures / requests",
    "requests_per_s": "measured requests (successful, on target) ended in the window / window_s",
    "output_tokens_per_s": "output tokens streamed during the window by any request (vllm_stress.core.metrics."
    "streamed_tokens) / window_s; empty when none of the level's successful requests carried usage",
    "total_tokens_per_s": "(output tokens as above + prompt tokens of the requests whose first token came in the "
    "window) / window_s",
    "rows_without_usage": "successful requests ended in the window without usage",
    "concurrency_mean": "requests actually in flight, averaged over the window (any level's requests)",
    "server_e2e_mean_s": "the server's own mean e2e latency (arrival in its engine to finish, server_metrics.csv) of "
    "the requests it finished in the window",
    "server_in_system_mean": "requests the server's engine held (running + waiting), by Little's law from its own "
    "e2e histogram alone: the sum of the e2e of the requests it finished in the scrape intervals wholly inside the window "
    "/ the time those intervals cover (none: empty)",
    "server_waiting_mean": "requests waiting in the engine's queue, the same way from its queue-time histogram",
    "server_http_held_mean": "requests vLLM's HTTP layer held (its http_request_duration_highr_seconds histogram, the "
    "same way): the engine's time plus the frontend's (HTTP, chat template, tokenization, detokenization, streaming)",
    "server_frontend_cpu_percent": "CPU of vLLM's API server process during the window (its "
    "process_cpu_seconds_total; 100 = one core): near 100 its event loop is the limit, and requests wait in it "
    "before its HTTP layer times them",
    "server_running_mean": "requests in the engine's running batch (vllm:num_requests_running), the mean of the "
    "scrapes in the window: flat at max_num_seqs while requests wait, the batch is the limit",
    "server_load_margin": "the relative margin of the Little's-law counts above (server_in_system_mean, "
    "server_waiting_mean, server_http_held_mean): server_e2e_mean_s / the time the scrapes wholly inside the window "
    "cover, as a request cut by either edge counts whole or not at all; a shortfall is judged only beyond it",
    "client_cpu_max_percent": "CPU of the busiest load-generating process (client_health.csv, 100 = one core): the "
    "highest of the samples whose span (since the process's previous sample) overlaps the window",
    "client_loop_lag_max_ms": "how late the most starved load generator's event loop ran its timers, on average over "
    "a sample (client_health.csv): the highest of the samples overlapping the window; its timestamps are late by "
    "about as much",
    "client_read_behind_p99_ms": "how late the latest-reading load generator read its chunks: per process and sample "
    "(client_health.csv) the p99 of read time - the kernel's arrival time, the highest of the samples overlapping the "
    "window; at 5 % of the e2e p50 (CLIENT_READ_BEHIND_SHARE) and 20 ms at least the level is client-bound: its "
    "users sent their next requests late enough to lower the load",
    "ttft_p50_s": "time to first token percentiles (p50/p90/p99) of the measured requests ended in the window",
    "tpot_p50_s": "time per output token after the first, same requests",
    "itl_p50_s": "inter-chunk latency of the level's successful streams that ended during its hold "
    "(itl_histogram.csv buckets): per chunk, as vllm bench serve's; TPOT is per token",
    "e2e_p50_s": "end-to-end latency, same requests",
    "schedule_lag_p50_s": "open loop: how late the level's requests were sent after their scheduled arrival, "
    "waiting for a free user or in a process that woke late (p50/p99; TTFT and e2e start at the send, as in vllm bench serve, so this wait is not in them)",
    "server_preemptions": "sequences the server preempted during the window (vllm:num_preemptions_total gained): "
    "its KV cache could not hold every running sequence, so some were evicted to be recomputed",
    "server_kv_cache_usage_mean": "the share of the server's KV-cache blocks in use (vllm:kv_cache_usage_perc, 0 to 1), "
    "averaged over the scrapes in the window",
    "gpu_power_w": "the GPUs' power (gpu_metrics.csv, with --gpu-metrics-url): each GPU's mean watts over its scrapes "
    "in the window, summed over every GPU of every exporter",
    "gpu_utilization_percent": "the GPUs' mean utilisation over the window, 0 to 100 (DCGM_FI_DEV_GPU_UTIL, AMD's "
    "gpu_gfx_activity): the share of time a kernel ran, not how much of the GPU it used",
    "gpu_joules_per_output_token": "energy per output token: gpu_power_w / output_tokens_per_s (from the means over "
    "repeats)",
    "goodput_requests_per_s": "measured requests meeting every SLO / window_s (TPOT counts as met when undefined)",
    "goodput_ratio": "requests meeting every SLO / requests",
    "output_tokens_per_s_per_user": "interactivity: 1 / tpot_p50_s, the decode speed the median request streamed at "
    "once its first token came (not output tok/s / users, which counts TTFT, queueing and idle users as slowness)",
    "output_tokens_per_s_per_gpu": "with --gpus: output_tokens_per_s / GPUs",
    "usd_per_m_output_tokens": "with --gpu-hour-price: what a million output tokens cost at the level's output tok/s, "
    "price per GPU-hour × GPUs / (output_tokens_per_s × 3600) × 1e6 (from the mean throughput over repeats)",
    "usd_per_m_total_tokens": "the same per million total (prompt + output) tokens, from total_tokens_per_s",
    "partial": "the window was cut short because the run stopped early",
}
LEVEL_FIELDS = BASE_FIELDS | level_fields()  # every per-level field, defined once; the report's glossary prints this


def level_windows(run: Run) -> tuple[pd.DataFrame, bool]:
    """The window of each level (users, start, end, partial, held) and whether the run is partial."""
    rows = run.requests
    last_end = rows["end_time"].max()
    if "levels" not in run.tables:
        never_held = not run.tables.get("not_held", pd.DataFrame()).empty  # a plain run has no hold to miss
        windows = derived_windows(rows).assign(partial=never_held, held=not never_held)
        return windows, run.interrupted or never_held
    levels = run.tables["levels"].sort_values("hold_start")
    windows = pd.DataFrame(
        {"users": levels["users"].astype("int64"), "start": levels["hold_start"], "end": levels["hold_end"]}
    )
    unlisted = unlisted_level_windows(run, windows)
    partial = bool(run.interrupted or not unlisted.empty or windows["end"].isna().any() or stopped_early(rows, windows))
    if partial:
        windows["end"] = windows["end"].fillna(last_end).clip(upper=last_end)
    windows["partial"] = (windows["end"] < levels["hold_end"].fillna(np.inf)) & partial
    windows = pd.concat([windows.assign(held=True), unlisted.assign(partial=True, held=False)], ignore_index=True)
    return windows[windows["end"] > windows["start"]].reset_index(drop=True), partial


def unlisted_level_windows(run: Run, windows: pd.DataFrame) -> pd.DataFrame:
    """Derived windows for the levels that were never held: levels.csv says the run stopped during their ramp or
    warm-up, or has no row for them because the run was killed during them (a level's row is written when it ends).
    The requests of an unlisted level all start after the last listed level's hold_end; any other is an error."""
    rows = run.requests
    unlisted = rows[~rows["users"].isin(windows["users"])]
    if unlisted.empty:
        return pd.DataFrame(columns=["users", "start", "end"])
    not_held = run.tables.get("not_held", pd.DataFrame(columns=["users"]))["users"]
    first_start = unlisted.groupby("users")["start_time"].min()
    late = first_start >= windows["end"].max() - LEVEL_CLOCK_SLACK_S
    unknown = first_start[~late & ~first_start.index.isin(not_held)].index.tolist()
    if unknown:
        raise AnalysisError(f"{run.path / REQUESTS_FILE}: unknown level(s) users={unknown} not in {LEVELS_FILE}")
    return derived_windows(unlisted)


def derived_windows(rows: pd.DataFrame) -> pd.DataFrame:
    """Windows from the rows alone: first start + warm-up margin .. last start of each level."""
    by_level = rows.groupby("users")
    first_start = by_level["start_time"].min()
    last_start = by_level["start_time"].max()
    end = last_start.where(last_start > first_start, by_level["end_time"].max())
    margin = np.minimum(by_level["e2e_s"].median(), (end - first_start) / 2)
    windows = pd.DataFrame({"start": first_start + margin, "end": end}).reset_index()
    return windows[windows["end"] > windows["start"]].reset_index(drop=True)


def stopped_early(rows: pd.DataFrame, windows: pd.DataFrame) -> bool:
    """The rows end before the last level's hold_end by more than one median e2e of that level.

    In a closed loop a level keeps completing requests until its end, so a silence longer than one typical request
    means the run stopped.
    """
    last = windows.iloc[-1]
    level_rows = rows[rows["users"] == last["users"]]
    slack = level_rows["e2e_s"].median() if not level_rows.empty else 0.0
    return bool(rows["end_time"].max() < last["end"] - slack)


def level_stats(
    run: Run, windows: pd.DataFrame, slo: dict[str, float] | None = None, replicas: pd.DataFrame | None = None
) -> pd.DataFrame:
    """One row per level with every field of LEVEL_FIELDS (percentiles p50/p90/p99): the base profile's, then each
    capability's (vllm_stress.analysis.features); ``replicas``: the run's replicas' level rows
    (vllm_stress.analysis.replicas), when it had several."""
    rows = classify(run.requests)
    by_users = windows.set_index("users")
    window_s = by_users["end"] - by_users["start"]
    ended = ended_in_windows(rows, windows)
    counted = ended[~ended["aborted"] & ~ended["cancelled"]]
    measured = ended[ended["measured"]]
    stats = pd.DataFrame(index=by_users.index)
    stats["window_s"] = window_s
    stats = stats.join(steady_verdicts(rows, windows))

    def per_level(flags: pd.Series) -> pd.Series:
        return flags.groupby(ended["users"]).sum().reindex(stats.index, fill_value=0)

    stats["requests"] = counted.groupby("users").size().reindex(stats.index, fill_value=0)
    stats["failures"] = per_level(ended["failed"])
    stats["aborted"] = per_level(ended["aborted"])
    stats["off_target"] = per_level(ended["off_target"])
    stats["success_rate"] = 1 - stats["failures"] / stats["requests"].where(stats["requests"] > 0)
    stats["requests_per_s"] = measured.groupby("users").size().reindex(stats.index, fill_value=0) / window_s
    stats["rows_without_usage"] = per_level(ended["ok"] & ended["completion_tokens"].isna())
    output_tokens, prompt_tokens = tokens_in_windows(rows, windows)
    successes = per_level(ended["ok"])
    counted_tokens = ~((successes > 0) & (stats["rows_without_usage"] == successes))
    stats["output_tokens_per_s"] = (output_tokens / window_s).where(counted_tokens)
    stats["total_tokens_per_s"] = ((output_tokens + prompt_tokens) / window_s).where(counted_tokens)
    stats["concurrency_mean"] = mean_in_flight(rows, windows).to_numpy()
    stats = stats.join(server_load(run.tables.get("server"), windows)).join(gpu_load(run.tables.get("gpu"), windows))
    health = run.tables.get("client_health")
    stats["client_cpu_max_percent"] = client_health_max(health, windows, "cpu_percent")
    stats["client_loop_lag_max_ms"] = client_health_max(health, windows, "loop_lag_ms")
    stats["client_read_behind_p99_ms"] = client_health_max(health, windows, "read_behind_p99_ms")
    stats = stats.join(latency_percentiles(measured)).join(itl_percentiles(run.tables.get("itl")))
    stats["server_preemptions"] = counter_gains(run.tables.get("server"), windows, "preemptions")
    stats["server_kv_cache_usage_mean"] = gauge_means(run.tables.get("server"), windows, "kv_cache_usage")
    if slo:
        stats = stats.join(goodput(measured, slo, window_s, stats["requests"]))
    stats["partial"] = by_users["partial"]
    level = LevelInput(run, windows, rows, ended, measured, stats, replicas)
    for feature in features():
        if (fields := feature.level_fields(level)) is not None:
            stats = stats.join(fields)
    return stats.reset_index().copy()  # the copy is one block per type: the columns above came one at a time


def steady_verdicts(rows: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """steady, steady_reason, lifetimes and hold_needed_s of each window (vllm_stress.core.steady)."""
    first, end, output, _ = token_times(rows)
    e2e, ttft = rows["e2e_s"].to_numpy(float), rows["ttft_s"].to_numpy(float)
    verdicts = []
    for users, start, stop, held in zip(
        windows["users"], windows["start"], windows["end"], windows["held"], strict=True
    ):
        if not held:
            verdicts.append(steady.Verdict(False, NEVER_HELD, np.nan, np.nan))
            continue
        measured = (rows["measured"] & (rows["users"] == users)).to_numpy()
        sample = steady.Requests(rows["start_time"].to_numpy(), end, first, output, measured, e2e, ttft)
        verdicts.append(steady.judge(start, stop, sample))
    return pd.DataFrame(
        {
            "steady": [v.steady for v in verdicts],
            "steady_reason": [v.reason for v in verdicts],
            "lifetimes": [v.lifetimes for v in verdicts],
            "hold_needed_s": [v.hold_needed_s for v in verdicts],
        },
        index=windows["users"],
    )


NEVER_HELD = "the run stopped during this level's ramp or warm-up: it was never held"


def server_load(server: pd.DataFrame | None, windows: pd.DataFrame) -> pd.DataFrame:
    """What the server held in each window (vllm_stress.core.bound.server_load; NaN without server_metrics.csv)."""
    scrapes = [] if server is None else records(server.sort_values("time"))
    loads = [
        bound.server_load(scrapes, start, end) for start, end in zip(windows["start"], windows["end"], strict=True)
    ]
    return pd.DataFrame(loads, index=windows["users"], columns=list(bound.SERVER_LOAD_FIELDS), dtype=float)


def gpu_load(gpus: pd.DataFrame | None, windows: pd.DataFrame) -> pd.DataFrame:
    """The GPUs in each window (gpu_metrics.csv): each GPU's mean power over its scrapes in the window, summed over
    the GPUs, and their mean utilisation; NaN without the file or a scrape in the window."""
    loads = []
    for start, end in zip(windows["start"], windows["end"], strict=True):
        inside = gpus[in_window(gpus["time"], start, end)] if gpus is not None else pd.DataFrame()
        per_gpu = inside.groupby(["source", "gpu"])[["power_w", "utilization_percent"]].mean() if len(inside) else None
        loads.append(
            (np.nan, np.nan)
            if per_gpu is None
            else (per_gpu["power_w"].sum(min_count=1), per_gpu["utilization_percent"].mean())
        )
    return pd.DataFrame(loads, index=windows["users"], columns=list(GPU_LOAD_FIELDS), dtype=float)


def client_health_max(health: pd.DataFrame | None, windows: pd.DataFrame, column: str) -> np.ndarray:
    """The highest ``column`` of client_health.csv in each window (vllm_stress.core.bound.health_max; NaN without
    the file)."""
    samples = [] if health is None else records(health.sort_values("time"))
    return per_window(windows, lambda a, b: bound.health_max(samples, column, a, b))


def mean_in_flight(rows: pd.DataFrame, windows: pd.DataFrame) -> pd.Series:
    """Time-averaged number of requests in flight in each window (vllm_stress.core.metrics.mean_in_flight)."""
    start, end = rows["start_time"].to_numpy(), rows["end_time"].to_numpy()
    return pd.Series(per_window(windows, lambda a, b: in_flight_mean(start, end, a, b)), index=windows["users"])


def latency_percentiles(measured: pd.DataFrame) -> pd.DataFrame:
    """ttft/tpot/e2e (and the open loop's schedule lag) p50/p90/p99 per level."""
    columns = [*LATENCY_METRICS.values(), "schedule_lag_s"]
    return percentiles_by_level(measured, {column.removesuffix("_s"): column for column in columns}, PERCENTILES)


def percentile_field(column: str, quantile: float) -> str:
    """'e2e_s', 0.99 -> 'e2e_p99_s'."""
    return f"{column.removesuffix('_s')}_p{round(quantile * 100)}_s"


def itl_percentiles(histogram: pd.DataFrame | None) -> pd.DataFrame:
    """ITL p50/p90/p99 per level from (users, itl_ms, count) rows (vllm_stress.core.metrics.bucket_percentile)."""
    columns = [percentile_field("itl_s", p / 100) for p in PERCENTILES]
    if histogram is None or histogram.empty:
        return pd.DataFrame(columns=columns, dtype=float)
    result = {}
    for users, level in histogram.groupby(histogram["users"].astype("int64")):
        totals = level.groupby("itl_ms")["count"].sum()
        counts = dict(zip(totals.index.to_numpy(float).tolist(), totals.to_numpy(int).tolist(), strict=True))
        result[users] = [bucket_percentile(counts, p / 100) for p in PERCENTILES]
    return pd.DataFrame.from_dict(result, orient="index", columns=columns, dtype=float) / 1000


def goodput(measured: pd.DataFrame, slo: dict[str, float], window_s: pd.Series, requests: pd.Series) -> pd.DataFrame:
    """Requests meeting every SLO (DistServe / ``vllm bench serve --goodput`` definition) per level."""
    met = pd.Series(True, index=measured.index)
    for name, limit in slo.items():
        column = measured[LATENCY_METRICS[name]]
        met &= (column.fillna(0.0) if name == "tpot" else column) <= limit
    good = met.groupby(measured["users"]).sum().reindex(window_s.index, fill_value=0)
    return pd.DataFrame(
        {"goodput_requests_per_s": good / window_s, "goodput_ratio": good / requests.where(requests > 0)}
    )


def timeline(rows: pd.DataFrame) -> pd.DataFrame:
    """Per second since the first start: requests in flight, failures ended, and output tokens streamed in that
    second (spread from first token to end as in the windows)."""
    origin = np.floor(rows["start_time"].min())
    start_s = (rows["start_time"] - origin).astype("int64").to_numpy()
    end_s = (rows["end_time"] - origin).astype("int64").to_numpy()
    length = end_s.max() + 1
    in_flight = np.cumsum(np.bincount(start_s, minlength=length) - np.bincount(end_s, minlength=length))
    return pd.DataFrame(
        {
            "second": np.arange(length),
            "unix_time": origin + np.arange(length),
            "in_flight": in_flight,
            "failed": np.bincount(end_s[classify(rows)["failed"].to_numpy()], minlength=length),
            "output_tokens": tokens_per_second(rows, origin, length),
        }
    )


def tokens_per_second(rows: pd.DataFrame, origin: float, length: int) -> np.ndarray:
    """Output tokens streamed in each second [k, k + 1) after ``origin``, k < length, without a loop over rows.

    A row streams at rate r = tokens / (end - first) over [first, end), so the tokens streamed before time t are
    r * (ramp(t - first) - ramp(t - end)) with ramp(x) = max(x, 0); summed over rows at whole seconds k that is
    k * R(k) - S(k) per edge, R and S being cumulative sums of r and r * edge over the edges before k.
    """
    first, end, output, _ = token_times(rows)
    first, end = first - origin, end - origin
    spread = end > first
    rate = output[spread] / (end[spread] - first[spread])
    seconds = np.arange(length + 1)

    def ramp_sum(edges: np.ndarray) -> np.ndarray:
        after = np.floor(edges).astype("int64") + 1  # the first whole second after each edge
        rates = np.cumsum(np.bincount(after, rate, minlength=length + 1)[: length + 1])
        weighted = np.cumsum(np.bincount(after, rate * edges, minlength=length + 1)[: length + 1])
        return seconds * rates - weighted

    streamed = np.diff(ramp_sum(first[spread]) - ramp_sum(end[spread]))
    at_once = np.bincount(np.floor(end[~spread]).astype("int64"), output[~spread], minlength=length)[:length]
    per_second: np.ndarray = streamed + at_once
    return per_second


def error_counts(rows: pd.DataFrame) -> dict[str, int]:
    """Failed requests of the whole run by error class (empty class shown as "unknown"); aborted ones apart."""
    failed = rows.loc[classify(rows)["failed"], "error"].fillna("unknown")
    return {str(name): int(count) for name, count in failed.value_counts().items()}
