"""Metrics over a time window and the quantile rules, defined once for the live view, the load shape, the analysis,
``plan --from-run`` and calibrate (docs/concepts/metrics.md). Arrays hold one entry per request (unix seconds);
windows are ``[a, b)``, and what belongs to one follows one rule per kind of data:

- a moment (a request's end or first token, a scrape of the server or the GPUs) when its time is in ``[a, b)``
  (``in_window``); a scrape's counters and histograms gained since the previous scrape count with it;
- a load generator's health sample, which covers the time since the same process's previous sample, when that span
  overlaps the window (``health_samples``), so a window's busiest stretch is never left out;
- output tokens as streamed evenly from a request's first token to its end (``streamed_tokens``), prompt tokens at
  its first token.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np


def in_window(times: Any, a: Any, b: Any) -> Any:
    """Whether each time is in ``[a, b)``: a bool for one time (a float), a mask for a numpy array or pandas Series
    of them (``a`` and ``b`` may be of the same length: a window per time)."""
    return (times >= a) & (times < b)


def health_samples(samples: Iterable[Mapping[str, Any]], a: float, b: float) -> list[Mapping[str, Any]]:
    """The samples of client_health.csv (sorted by time; ``worker``, ``time``) whose span, since the same process's
    previous sample, overlaps ``[a, b)``; a process's first sample spans only its own time (what came before it is
    not known, and a worker that joins late must not count in the windows before it came)."""
    since: dict[str, float] = {}
    inside = []
    for sample in samples:
        previous = since.get(sample["worker"], sample["time"])
        since[sample["worker"]] = sample["time"]
        if sample["time"] > a and previous < b:
            inside.append(sample)
    return inside


def streamed_tokens(first: np.ndarray, end: np.ndarray, tokens: np.ndarray, a: float, b: float) -> float:
    """Output tokens streamed during ``[a, b)`` (see the module docstring)."""
    span = end - first
    overlap = np.clip(np.minimum(end, b) - np.maximum(first, a), 0, None)
    at_once = (span <= 0) & in_window(end, a, b)
    share = np.where(span > 0, overlap / np.where(span > 0, span, 1), at_once)
    return float((tokens * share).sum())


def mean_in_flight(start: np.ndarray, end: np.ndarray, a: float, b: float) -> float:
    """Requests in flight during ``[a, b)``, time-averaged."""
    if b <= a:
        return float("nan")
    return float(np.clip(np.minimum(end, b) - np.maximum(start, a), 0, None).sum() / (b - a))


def percentile(values: np.ndarray, q: float) -> float:
    """The ``q``-th percentile (0..100) of the values that are not NaN, linear interpolation; NaN when none."""
    present = values[~np.isnan(values)]
    return float(np.percentile(present, q)) if present.size else float("nan")


def bucket_percentile(histogram: dict[float, int], q: float) -> float | None:
    """The ``q`` (0..1) percentile of a {bucket: count} histogram, nearest rank; None when it is empty."""
    total = sum(histogram.values())
    if not total:
        return None
    rank = max(math.ceil(q * total), 1)
    for bucket in sorted(histogram):
        rank -= histogram[bucket]
        if rank <= 0:
            return bucket
    return bucket


def histogram_quantile(q: float, cumulative: dict[float, float]) -> float | None:
    """The q-quantile of cumulative bucket counts {upper bound: count}, interpolated linearly inside its bucket as
    PromQL's ``histogram_quantile`` does (the +Inf bucket answers its lower bound); None without observations."""
    total = cumulative.get(math.inf, 0.0)
    if total <= 0:
        return None
    rank = q * total
    lower, below = 0.0, 0.0
    for upper in sorted(bound for bound in cumulative if bound != math.inf):
        count = cumulative[upper]
        if count >= rank:
            return lower + (upper - lower) * (rank - below) / (count - below)
        lower, below = upper, count
    return lower  # in the +Inf bucket


def tpot(e2e_s: float, ttft_s: float | None, completion_tokens: float | None) -> float | None:
    """Time per output token after the first, or None when it is undefined: the inter-token latency per token, as
    ``vllm bench serve`` computes TPOT (``vllm/benchmarks/serve.py``: (latency - ttft) / (output tokens - 1)). Its
    ITL is per chunk instead (one gap per output-bearing chunk's arrival, ``vllm/benchmarks/lib/
    endpoint_request_func.py``), and so is itl_histogram.csv's: with several tokens per chunk (``tokens_per_chunk``)
    an ITL is a chunk's gap, about tokens_per_chunk x TPOT."""
    if ttft_s is None or not completion_tokens or completion_tokens <= 1 or math.isnan(ttft_s):
        return None
    return (e2e_s - ttft_s) / (completion_tokens - 1)


def tokens_per_chunk(completion_tokens: float, chunks: float) -> float:
    """Output tokens per output-bearing chunk (usage's completion tokens / chunks that carried output, summed over
    the requests that have both): 1 at vLLM's stream_interval 1, more when a chunk carries several tokens (a
    speculative-decoding step's accepted drafts, a larger stream_interval); NaN without chunks."""
    return completion_tokens / chunks if chunks > 0 else math.nan
