"""Per-level steady-state windows and the statistics of one run in each window.

Window of a level (what "steady state" means here):

* with ``levels.csv``: ``[hold_start, hold_end)`` — the ramp (``ramp_start`` .. ``hold_start``) and everything
  after ``hold_end`` (the next level's ramp, the final drain) are left out;
* without it (a plain Locust run): per ``users`` value, from the level's first request start plus a warm-up margin
  (the level's median e2e, at most half the level) to the level's *last request start* — after that no request of
  the level is sent any more, so what follows is the drain, not steady state (a header-only levels.csv counts as
  none);
* a level with rows but no ``levels.csv`` row (the run was killed during it: levels.csv gets a level's row when the
  level ends) gets a window derived from its rows, as above, and is marked partial.

Attribution: a request belongs to the level in its ``users`` column (the level it started in). Its latencies and
its success count where it *ended*: a level's percentiles and req/s come from its requests that ended inside the
window. Token throughput is what the server produced *during* the window, whoever asked for it: each request's
output tokens are spread evenly from its first token (its start when it has no TTFT) to its end (they stream at a
steady pace in between), its prompt tokens count when its first token came (the prefill was done), and the parts
that fall inside the window are summed. This holds when requests last longer than the window (long outputs,
queueing at high concurrency), where counting only the requests that ended inside it would be lumpy or empty.
Tokens of failed or aborted streams count as far as they were received (``chunks`` when there is no usage). The
per-second timeline spreads output tokens the same way. Rows from several workers are already merged into one
file; nothing here depends on their order.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.load import AnalysisError, Run
from locustfiles.records import LEVELS_FILE, REQUESTS_FILE

PERCENTILES = (50, 90, 99)
LEVEL_CLOCK_SLACK_S = 1.0  # worker rows of a new level may start slightly before the master wrote the last hold_end
LATENCY_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}  # SLO / percentile name -> request column

# Every per-level field, defined once; the report's glossary prints this.
LEVEL_FIELDS = {
    "users": "target concurrency (Locust users) of the level",
    "window_s": "length of the steady-state window, seconds",
    "requests": "requests of the level that ended in the window (successes and failures)",
    "failures": "of those, the failed ones",
    "success_rate": "1 - failures / requests",
    "requests_per_s": "successful requests ended in the window / window_s",
    "output_tokens_per_s": "output tokens streamed during the window by any request (each request's spread evenly "
    "from its first token to its end) / window_s",
    "total_tokens_per_s": "(output tokens as above + prompt tokens of the requests whose first token came in the "
    "window) / window_s",
    "rows_without_usage": "successful requests ended in the window without usage (tok/s counts their chunks as output "
    "tokens and no prompt tokens)",
    "concurrency_mean": "requests actually in flight, averaged over the window (any level's requests)",
    "server_e2e_mean_s": "the server's own mean e2e latency (arrival to finish, server_metrics.csv) of the requests it "
    "finished in the window",
    "server_in_system_mean": "requests the server held (running + waiting), by Little's law: concurrency_mean x "
    "server_e2e_mean_s / the client's mean e2e of the successful requests ended in the window",
    "server_waiting_mean": "requests waiting in the server's queue: server_in_system_mean x the share of the server's "
    "e2e spent queued (its queue-time histogram)",
    "client_cpu_max_percent": "CPU of the busiest load-generating process (client_health.csv, 100 = one core): the "
    "highest of the samples whose span (since the process's previous sample) overlaps the window",
    "ttft_p50_s": "time to first token percentiles (p50/p90/p99) of the successful requests ended in the window",
    "tpot_p50_s": "time per output token after the first, same requests",
    "itl_p50_s": "inter-chunk latency from itl_histogram.csv (whole level, not only the window)",
    "e2e_p50_s": "end-to-end latency, same requests",
    "goodput_requests_per_s": "successful requests meeting every SLO / window_s (TPOT counts as met when undefined)",
    "goodput_ratio": "requests meeting every SLO / requests",
    "partial": "the window was cut short because the run stopped early",
}


def level_windows(run: Run) -> tuple[pd.DataFrame, bool]:
    """The steady-state window of each level (users, start, end, partial) and whether the run is partial."""
    rows = run.requests
    last_end = rows["end_time"].max()
    if "levels" not in run.tables:
        return derived_windows(rows).assign(partial=False), run.interrupted
    levels = run.tables["levels"].sort_values("hold_start")
    windows = pd.DataFrame(
        {"users": levels["users"].astype("int64"), "start": levels["hold_start"], "end": levels["hold_end"]}
    )
    unlisted = unlisted_level_windows(run, windows)
    partial = run.interrupted or not unlisted.empty or windows["end"].isna().any() or stopped_early(rows, windows)
    if partial:
        windows["end"] = windows["end"].fillna(last_end).clip(upper=last_end)
    windows["partial"] = partial & (windows["end"] < levels["hold_end"].fillna(np.inf))
    windows = pd.concat([windows, unlisted.assign(partial=True)], ignore_index=True)
    return windows[windows["end"] > windows["start"]].reset_index(drop=True), bool(partial)


def unlisted_level_windows(run: Run, windows: pd.DataFrame) -> pd.DataFrame:
    """Derived windows for levels missing from levels.csv because the run was killed during them.

    levels.csv gets a level's row when the level ends, so a killed run's last level has rows but no levels.csv
    row. Its requests all start after the last listed level's hold_end; any other unlisted level is an error.
    """
    rows = run.requests
    unlisted = rows[~rows["users"].isin(windows["users"])]
    if unlisted.empty:
        return pd.DataFrame(columns=["users", "start", "end"])
    first_start = unlisted.groupby("users")["start_time"].min()
    unknown = first_start[first_start < windows["end"].max() - LEVEL_CLOCK_SLACK_S].index.tolist()
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


def level_stats(run: Run, windows: pd.DataFrame, slo: dict[str, float] | None = None) -> pd.DataFrame:
    """One row per level with every field of LEVEL_FIELDS (percentiles p50/p90/p99)."""
    rows = run.requests
    by_users = windows.set_index("users")
    window_s = by_users["end"] - by_users["start"]
    in_window = rows["end_time"].between(
        rows["users"].map(by_users["start"]), rows["users"].map(by_users["end"]), inclusive="left"
    )
    ended = rows[in_window]
    good = ended[ended["ok"]]
    stats = pd.DataFrame(index=by_users.index)
    stats["window_s"] = window_s
    stats["requests"] = ended.groupby("users").size().reindex(stats.index, fill_value=0)
    stats["failures"] = (~ended["ok"]).groupby(ended["users"]).sum().reindex(stats.index, fill_value=0)
    stats["success_rate"] = 1 - stats["failures"] / stats["requests"].where(stats["requests"] > 0)
    stats["requests_per_s"] = good.groupby("users").size().reindex(stats.index, fill_value=0) / window_s
    output_tokens, prompt_tokens = tokens_in_windows(rows, windows)
    stats["output_tokens_per_s"] = output_tokens.to_numpy() / window_s
    stats["total_tokens_per_s"] = (output_tokens + prompt_tokens).to_numpy() / window_s
    no_usage = good["completion_tokens"].isna().groupby(good["users"]).sum()
    stats["rows_without_usage"] = no_usage.reindex(stats.index, fill_value=0)
    stats["concurrency_mean"] = mean_in_flight(rows, windows).to_numpy()
    stats = stats.join(server_held(run.tables.get("server"), windows, stats["concurrency_mean"], good))
    stats["client_cpu_max_percent"] = client_cpu_max(run.tables.get("client_health"), windows).to_numpy()
    stats = stats.join(latency_percentiles(good)).join(itl_percentiles(run.tables.get("itl")))
    if slo:
        stats = stats.join(goodput(ended, slo, window_s, stats["requests"]))
    stats["partial"] = windows.set_index("users")["partial"]
    return stats.reset_index()


def tokens_in_windows(rows: pd.DataFrame, windows: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Output and prompt tokens the server produced inside each window (see the module docstring)."""
    first, end, output, prompt = token_times(rows)
    span = end - first
    outputs, prompts = [], []
    for w_start, w_end in zip(windows["start"], windows["end"], strict=True):
        overlap = np.clip(np.minimum(end, w_end) - np.maximum(first, w_start), 0, None)
        point = (span <= 0) & (end >= w_start) & (end < w_end)  # all tokens at one instant inside the window
        share = np.where(span > 0, overlap / np.where(span > 0, span, 1), point)
        outputs.append((output * share).sum())
        prompts.append(prompt[(first >= w_start) & (first < w_end)].sum())
    return pd.Series(outputs, index=windows["users"]), pd.Series(prompts, index=windows["users"])


def token_times(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: first token time (the start without a TTFT), end time, output tokens (usage, else the chunks
    received, so failed and aborted streams count what they streamed) and prompt tokens (of rows that got a first
    token or succeeded)."""
    first = (rows["start_time"] + rows["ttft_s"].fillna(0.0)).to_numpy()
    end = rows["end_time"].to_numpy()
    output = rows["completion_tokens"].fillna(rows["chunks"]).fillna(0).to_numpy(dtype=float)
    prompt = rows["prompt_tokens"].where(rows["ttft_s"].notna() | rows["ok"], 0).fillna(0).to_numpy(dtype=float)
    return first, end, output, prompt


def server_held(server: pd.DataFrame | None, windows: pd.DataFrame, concurrency: pd.Series,
                good: pd.DataFrame) -> pd.DataFrame:
    """server_e2e_mean_s, server_in_system_mean and server_waiting_mean (Little's law, see LEVEL_FIELDS)."""
    load = server_load(server, windows)
    client_e2e_mean = good.groupby("users")["e2e_s"].mean().reindex(load.index)
    in_system = concurrency * load["server_e2e_mean_s"] / client_e2e_mean
    return pd.DataFrame({"server_e2e_mean_s": load["server_e2e_mean_s"], "server_in_system_mean": in_system,
                         "server_waiting_mean": in_system * load["server_queued_share"]})


def server_load(server: pd.DataFrame | None, windows: pd.DataFrame) -> pd.DataFrame:
    """The server's mean e2e latency and the share of it spent queued, from the histograms of what it finished in
    each window (sums and counts since the previous scrape, server_metrics.csv; NaN without). These are time
    integrals: gauges sampled once per scrape are too noisy to decide anything with few scrapes and short requests
    (requests arriving together all sit in the queue until the next engine step)."""
    columns = ["server_e2e_mean_s", "server_queued_share"]
    if server is None or server.empty:
        return pd.DataFrame(np.nan, index=windows["users"], columns=columns)
    loads = []
    for w_start, w_end in zip(windows["start"], windows["end"], strict=True):
        inside = server[(server["time"] > w_start) & (server["time"] <= w_end)]
        count, e2e, queue = inside["e2e_count"].sum(), inside["e2e_sum_s"].sum(), inside["queue_sum_s"].sum()
        loads.append((e2e / count, queue / e2e) if count > 0 and e2e > 0 else (np.nan, np.nan))
    return pd.DataFrame(loads, index=windows["users"], columns=columns)


def client_cpu_max(health: pd.DataFrame | None, windows: pd.DataFrame) -> pd.Series:
    """client_cpu_max_percent of each window (NaN without client_health.csv). A process's sample covers the time
    since its previous sample, so the samples whose span overlaps the window count."""
    if health is None or health.empty:
        return pd.Series(np.nan, index=windows["users"])
    health = health.sort_values("time")
    since = health.groupby("worker")["time"].shift().fillna(-np.inf)
    maxima = [
        health.loc[(health["time"] > w_start) & (since < w_end), "cpu_percent"].max()
        for w_start, w_end in zip(windows["start"], windows["end"], strict=True)
    ]
    return pd.Series(maxima, index=windows["users"])


def mean_in_flight(rows: pd.DataFrame, windows: pd.DataFrame) -> pd.Series:
    """Time-averaged number of requests in flight in each window (sum of overlaps / window length)."""
    start = rows["start_time"].to_numpy()
    end = rows["end_time"].to_numpy()
    means = [
        np.clip(np.minimum(end, w_end) - np.maximum(start, w_start), 0, None).sum() / (w_end - w_start)
        for w_start, w_end in zip(windows["start"], windows["end"], strict=True)
    ]
    return pd.Series(means, index=windows["users"])


def latency_percentiles(good: pd.DataFrame) -> pd.DataFrame:
    """ttft/tpot/e2e p50/p90/p99 per level, linear interpolation (numpy's default, as ``vllm bench serve``)."""
    columns = list(LATENCY_METRICS.values())
    quantiles = good.groupby("users")[columns].quantile([p / 100 for p in PERCENTILES]).unstack()
    quantiles.columns = [percentile_field(name, q) for name, q in quantiles.columns]
    return quantiles.reindex(columns=[percentile_field(c, p / 100) for c in columns for p in PERCENTILES])


def percentile_field(column: str, quantile: float) -> str:
    """'e2e_s', 0.99 -> 'e2e_p99_s'."""
    return f"{column.removesuffix('_s')}_p{round(quantile * 100)}_s"


def itl_percentiles(histogram: pd.DataFrame | None) -> pd.DataFrame:
    """ITL p50/p90/p99 per level from (users, itl_ms, count): the smallest bucket whose cumulative count reaches q."""
    if histogram is None or histogram.empty:
        return pd.DataFrame(columns=[percentile_field("itl_s", p / 100) for p in PERCENTILES], dtype=float)
    ordered = histogram.sort_values(["users", "itl_ms"]).reset_index(drop=True)
    ordered["users"] = ordered["users"].astype("int64")
    by_level = ordered.groupby("users")["count"]
    cumulative = by_level.cumsum()
    total = by_level.transform("sum")
    result = {}
    for p in PERCENTILES:
        first = (cumulative >= total * p / 100).groupby(ordered["users"]).idxmax()
        result[percentile_field("itl_s", p / 100)] = ordered.loc[first, "itl_ms"].to_numpy() / 1000
    return pd.DataFrame(result, index=first.index)


def goodput(ended: pd.DataFrame, slo: dict[str, float], window_s: pd.Series, requests: pd.Series) -> pd.DataFrame:
    """Requests meeting every SLO (DistServe / ``vllm bench serve --goodput`` definition) per level."""
    met = ended["ok"].copy()
    for name, limit in slo.items():
        column = ended[LATENCY_METRICS[name]]
        met &= (column.fillna(0.0) if name == "tpot" else column) <= limit
    good = met.groupby(ended["users"]).sum().reindex(window_s.index, fill_value=0)
    return pd.DataFrame(
        {"goodput_requests_per_s": good / window_s, "goodput_ratio": good / requests.where(requests > 0)}
    )


def timeline(rows: pd.DataFrame) -> pd.DataFrame:
    """Per second since the first start: requests in flight, failures ended, and output tokens streamed in that
    second (spread from first token to end as in the windows, see the module docstring)."""
    origin = np.floor(rows["start_time"].min())
    start_s = (rows["start_time"] - origin).astype("int64").to_numpy()
    end_s = (rows["end_time"] - origin).astype("int64").to_numpy()
    length = end_s.max() + 1
    ok = rows["ok"].to_numpy()
    in_flight = np.cumsum(np.bincount(start_s, minlength=length) - np.bincount(end_s, minlength=length))
    return pd.DataFrame(
        {
            "second": np.arange(length),
            "unix_time": origin + np.arange(length),
            "in_flight": in_flight,
            "failed": np.bincount(end_s[~ok], minlength=length),
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
    return streamed + at_once


def error_counts(rows: pd.DataFrame) -> dict[str, int]:
    """Failed requests of the whole run by error class (empty class shown as "unknown")."""
    failed = rows.loc[~rows["ok"], "error"].fillna("unknown")
    return {str(name): int(count) for name, count in failed.value_counts().items()}
