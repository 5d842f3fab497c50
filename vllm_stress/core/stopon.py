"""The step ramp's early stop (``--stop-on``, docs/guides/stress.md): one level judged against its rules (parsed with
the --slo grammar, vllm_stress.core.slo) after its hold, on the level's measures over its hold (as the report takes
them) and on the server's waiting queue scraped during it."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import Any

from vllm_stress.core.bound import gauge_mean
from vllm_stress.core.slo import SATURATED, StopRule

QUEUE_PARTS = 3  # the hold is cut in thirds: the queue grows through it when each third's mean tops the one before
WAITING = "waiting"  # server_metrics.csv's vllm:num_requests_waiting


def queue_means(scrapes: Sequence[Mapping[str, Any]], start: float, end: float) -> list[float]:
    """The mean of the server's waiting queue (the scrapes' ``waiting``, summed over replicas) in each of
    QUEUE_PARTS equal parts of ``[start, end)`` (vllm_stress.core.bound.gauge_mean; NaN for a part without a scrape)."""
    part = (end - start) / QUEUE_PARTS
    return [gauge_mean(scrapes, WAITING, start + i * part, start + (i + 1) * part) for i in range(QUEUE_PARTS)]


def saturated(scrapes: Sequence[Mapping[str, Any]], start: float, end: float) -> str:
    """Why the server is over-saturated — its queue grew through the whole hold ``[start, end)``: each part's mean
    above the one before (a queue that has settled, however long, is not saturation) — or "" (also when a part of the
    hold has no scrape)."""
    means = queue_means(scrapes, start, end)
    if any(math.isnan(mean) for mean in means) or not all(a < b for a, b in pairwise(means)):
        return ""
    grown = " → ".join(f"{mean:.3g}" for mean in means)
    return f"{SATURATED}: the server's queue grew through the hold ({grown} waiting, the means of its thirds)"


def judge(
    rules: Sequence[StopRule],
    level: Mapping[str, float],
    scrapes: Sequence[Mapping[str, Any]],
    start: float,
    end: float,
) -> str:
    """The reason the first rule the level trips gives ("errors 7.2% > 5%"), or "" when it trips none: ``level``
    {field: value} (``success_rate``, ``ttft_p99_s`` ...) over the hold ``[start, end)``, ``scrapes`` the server's
    (``time``, ``waiting``) in the run."""
    for rule in rules:
        reason = saturated(scrapes, start, end) if rule.name == SATURATED else rule.reason(level)
        if reason:
            return reason
    return ""
