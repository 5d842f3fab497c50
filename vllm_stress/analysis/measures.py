"""The measures every part of the analysis shares, per level window: the populations of a run's request rows, the
tokens they streamed in a window, a server counter's gain or gauge's mean over a window, latency percentiles per
level and prefix-cache hit rates (the rules themselves: vllm_stress.core.metrics; docs/concepts/analysis.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import pandas as pd

from vllm_stress.core import bound
from vllm_stress.core.metrics import in_window, percentile, streamed_tokens
from vllm_stress.core.schema import ABORTED, CANCELLED

PERCENTILES = (50, 90, 99)


# One level's fields by name (LEVEL_FIELDS; in a config's summary also runs, underloaded, bound, and with repeats
# <field>_std, <field>_ci95 and unstable): numbers, text, flags or None.
Level = dict[str, Any]


LATENCY_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}  # SLO / percentile name -> request column


HEADLINE = (  # the level fields a run is kept and compared by: throughput and latency percentiles
    "output_tokens_per_s",
    "total_tokens_per_s",
    "requests_per_s",
    "ttft_p50_s",
    "ttft_p99_s",
    "tpot_p50_s",
    "tpot_p99_s",
    "e2e_p50_s",
    "e2e_p99_s",
)


def records(table: pd.DataFrame) -> list[dict[str, Any]]:
    """A table's rows as {column name: value}."""
    return cast(list[dict[str, Any]], table.to_dict("records"))  # the stubs' keys are Hashable; ours are names


def classify(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows with a boolean column per population of requests: aborted (by the stop), cancelled (by the client,
    --cancel-share), failed, off_target, measured."""
    aborted = ~rows["ok"] & (rows["error"] == ABORTED).fillna(False)
    cancelled = ~rows["ok"] & (rows["error"] == CANCELLED).fillna(False)
    off_target = rows["ok"] & (rows["count_mismatch"] | (rows["finish_reason"] == "abort").fillna(False))
    failed = ~rows["ok"] & ~aborted & ~cancelled
    return rows.assign(
        aborted=aborted, cancelled=cancelled, failed=failed, off_target=off_target, measured=rows["ok"] & ~off_target
    )


def ended_in_windows(rows: pd.DataFrame, windows: pd.DataFrame) -> pd.DataFrame:
    """The rows (requests or agent tasks: ``users``, ``end_time``) that ended in their own level's window
    (vllm_stress.core.metrics.in_window): the rows every per-level figure is over."""
    by_users = windows.set_index("users")
    ended: pd.DataFrame = rows[
        in_window(rows["end_time"], rows["users"].map(by_users["start"]), rows["users"].map(by_users["end"]))
    ]
    return ended


def prefix_hit_rates(measured: pd.DataFrame, by: str) -> pd.Series:
    """Per value of column ``by``: cached prompt tokens / prompt tokens of the measured rows whose server said how
    many it had cached (token-weighted; NaN where none said)."""
    told = measured[measured["cached_tokens"].notna()].groupby(by)
    return told["cached_tokens"].sum() / told["prompt_tokens"].sum()


def per_window(windows: pd.DataFrame, measure: Callable[[float, float], float]) -> np.ndarray:
    """``measure(start, end)`` of each window, in order."""
    return np.array([measure(a, b) for a, b in zip(windows["start"], windows["end"], strict=True)], dtype=float)


def tokens_in_windows(rows: pd.DataFrame, windows: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Output tokens streamed and prompt tokens prefilled inside each window (``token_times``; the rule:
    vllm_stress.core.metrics): the report's and ``plan --from-run``'s."""
    first, end, output, prompt = token_times(rows)
    outputs = per_window(windows, lambda a, b: streamed_tokens(first, end, output, a, b))
    prompts = per_window(windows, lambda a, b: prompt[in_window(first, a, b)].sum())
    return pd.Series(outputs, index=windows["users"]), pd.Series(prompts, index=windows["users"])


def token_times(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row: first token time (the start without a TTFT), end time, output tokens (usage, else the chunks
    received, so failed and aborted streams count what they streamed) and prompt tokens (of rows that got a first
    token or succeeded: usage, else the length the prompt was built to have, which /tokenize sized exactly — a stream
    cut after its first token had its prompt prefilled but never got its usage)."""
    first = (rows["start_time"] + rows["ttft_s"].fillna(0.0)).to_numpy()
    end = rows["end_time"].to_numpy()
    output = rows["completion_tokens"].fillna(rows["chunks"]).fillna(0).to_numpy(dtype=float)
    prompt = rows["prompt_tokens"].fillna(rows["target_prompt_tokens"])
    prefilled = prompt.where(rows["ttft_s"].notna() | rows["ok"], 0).fillna(0).to_numpy(dtype=float)
    return first, end, output, prefilled


def server_prefix_hit_rate(server: pd.DataFrame | None, windows: pd.DataFrame, tier: str = "") -> np.ndarray:
    """vllm:prefix_cache_hits / queries gained during each window (``tier`` "external_": a KV connector's, such as a
    CPU offload tier, vllm:external_prefix_cache_hits / queries); NaN without them or without queries."""
    return counter_ratio(server, windows, f"{tier}prefix_cache_hits", f"{tier}prefix_cache_queries")


def counter_ratio(server: pd.DataFrame | None, windows: pd.DataFrame, part: str, whole: str) -> np.ndarray:
    """What counter ``part`` gained during each window over what counter ``whole`` gained (a hit rate); NaN without
    them or where ``whole`` gained nothing."""
    parts, wholes = counter_gains(server, windows, part), counter_gains(server, windows, whole)
    rates: np.ndarray = np.divide(parts, wholes, out=np.full(len(windows), np.nan), where=wholes > 0)
    return rates


def counter_gains(server: pd.DataFrame | None, windows: pd.DataFrame, column: str) -> np.ndarray:
    """What the cumulative counter ``column`` of server_metrics.csv gained during each window: over the scrapes in
    it, the last one minus the one before the first; NaN without the counter or without a scrape on either side."""
    if server is None or server.empty or server[column].isna().all():
        return np.full(len(windows), np.nan)
    times, values = server.sort_values("time")[["time", column]].to_numpy(float).T

    def gain(a: float, b: float) -> float:
        inside = np.flatnonzero(in_window(times, a, b))
        return np.nan if not inside.size or not inside[0] else float(values[inside[-1]] - values[inside[0] - 1])

    return per_window(windows, gain)


def histogram_mean(server: pd.DataFrame | None, start: float, end: float, prefix: str) -> float:
    """The mean of the server histogram ``prefix`` (a key of schema.SERVER_HISTOGRAMS) over the scrapes in the
    window: the sums they add over the counts they add (each scrape holds what happened since the one before); NaN
    without the histogram or without an observation."""
    if server is None or server.empty:
        return math.nan
    inside = server[in_window(server["time"], start, end)]
    observed = float(inside[f"{prefix}_count"].astype(float).sum())
    return float(inside[f"{prefix}_sum_s"].astype(float).sum()) / observed if observed > 0 else math.nan


def histogram_means(server: pd.DataFrame | None, windows: pd.DataFrame, prefix: str) -> np.ndarray:
    """``histogram_mean`` of each window, in order."""
    return per_window(windows, lambda a, b: histogram_mean(server, a, b, prefix))


def gauge_means(server: pd.DataFrame | None, windows: pd.DataFrame, column: str) -> np.ndarray:
    """The mean of the gauge ``column`` of server_metrics.csv over the scrapes in each window (NaN without one)."""
    scrapes = [] if server is None else records(server.sort_values("time"))
    return per_window(windows, lambda a, b: bound.gauge_mean(scrapes, column, a, b))


def percentiles_by_level(rows: pd.DataFrame, columns: dict[str, str], percents: tuple[int, ...]) -> pd.DataFrame:
    """Per level of ``rows``: each {name: row column}'s percentiles (vllm_stress.core.metrics.percentile: linear
    interpolation, as ``vllm bench serve``), as fields ``{name}_p{percent}_s``."""
    fields = [f"{name}_p{p}_s" for name in columns for p in percents]
    result = {
        users: [percentile(level[column].to_numpy(float), p) for column in columns.values() for p in percents]
        for users, level in rows.groupby("users")
    }
    return pd.DataFrame.from_dict(result, orient="index", columns=fields).reindex(columns=fields)
