"""A Prometheus histogram's counts, kept once for the load generator's own series (master/promexport.py) and the
simulator's vLLM metrics (simulator/api/metrics.py): observations by bucket (``le``: the first upper bound at or above
the value, as Prometheus counts them), their count and sum. Exposing them is prometheus_client's (its
``HistogramMetricFamily``), which the core does not import."""

from __future__ import annotations

import itertools
from bisect import bisect_left
from collections.abc import Callable, Sequence


class Histogram:
    """Bucket counts (not cumulative; the last above every bound), count and sum of one histogram."""

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(float(bound) for bound in bounds)  # ascending upper bounds, +Inf left out
        self.counts = [0] * (len(self.bounds) + 1)
        self.count, self.sum = 0, 0.0

    def observe(self, value: float, times: int = 1) -> None:
        """Count ``value`` ``times`` times (a histogram of counts adds each bucket's count at once)."""
        self.counts[bisect_left(self.bounds, value)] += times
        self.count += times
        self.sum += value * times

    def buckets(self, label: Callable[[float], str]) -> list[tuple[str, int]]:
        """Cumulative (le, count) pairs, +Inf last, as ``HistogramMetricFamily.add_metric`` takes them; ``label``
        prints a bound (prometheus_client's ``floatToGoString``, as its own histograms print ``le``)."""
        bounds = (*self.bounds, float("inf"))
        return [(label(bound), total) for bound, total in zip(bounds, itertools.accumulate(self.counts), strict=True)]
