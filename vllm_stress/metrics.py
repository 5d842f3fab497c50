"""Metrics over a time window, defined once for the live view, the load shape and the analysis.

All functions take numpy arrays with one entry per request (unix seconds) and a window ``[a, b)``.

* **Tokens streamed in a window**: each request's output tokens are spread evenly from its first token (its start
  when it had none) to its end — a stream emits at a steady pace in between — and the part inside the window counts.
  A request whose tokens all came at one instant (no streaming) counts when that instant is inside. This stays right
  when requests last longer than the window (long outputs, queueing), where counting the requests that *ended* in the
  window would be lumpy or empty.
* **Requests in flight**: the time-average over the window of the number of requests between their start and end.
* **Sample percentiles**: linear interpolation between the order statistics (numpy's default, as
  ``vllm bench serve`` in vllm/benchmarks/serve.py computes its percentiles).
"""

from __future__ import annotations

import numpy as np


def streamed_tokens(first: np.ndarray, end: np.ndarray, tokens: np.ndarray, a: float, b: float) -> float:
    """Output tokens streamed during ``[a, b)`` (see the module docstring)."""
    span = end - first
    overlap = np.clip(np.minimum(end, b) - np.maximum(first, a), 0, None)
    at_once = (span <= 0) & (end >= a) & (end < b)
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
