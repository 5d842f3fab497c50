"""A soak's drift rule (``--shape soak:HOURS``), defined once: its hold cut into SOAK_WINDOWS equal windows, each
metric's per-window figures fitted by a least-squares line against time, and a metric drifted when the line's slope per
hour goes the bad way past its limit, clearly above the windows' scatter and by more than the metric's noise over the
soak (docs/concepts/drift.md gives the reasoning of every number here)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SOAK = "soak"  # --shape soak:HOURS[,USERS]: the shape's kind
SOAK_WINDOWS = 10  # equal windows of the soak's hold: enough points for a slope, enough requests in each
SIGNIFICANCE = 3.0  # a slope counts only when it is this many of its standard errors away from flat
MIB = 2**20


@dataclass(frozen=True)
class DriftRule:
    """One metric's limit: ``per_hour`` its largest harmless slope, in the metric's unit or, ``relative``, as a share
    of its mean; ``floor`` the least change over the whole soak that counts (same unit); ``worse`` +1 when growing is
    bad, -1 when falling is."""

    label: str
    per_hour: float
    floor: float
    relative: bool
    worse: int = 1


DRIFT_RULES = {  # per-window figure -> its rule
    "ttft_p99_s": DriftRule("TTFT p99", 0.10, 0.05, relative=True),
    "e2e_p50_s": DriftRule("e2e p50", 0.10, 0.05, relative=True),
    "output_tokens_per_s": DriftRule("output tok/s", 0.10, 0.05, relative=True, worse=-1),
    "failure_share": DriftRule("failure share", 0.01, 0.01, relative=False),
    "kv_cache_usage": DriftRule("server KV cache usage", 0.05, 0.05, relative=False),
    "server_rss_mib": DriftRule("server RSS", 256.0, 32.0, relative=False),
    "client_rss_mib": DriftRule("client RSS", 256.0, 32.0, relative=False),
}


@dataclass(frozen=True)
class Drift:
    """A metric's fitted line: its slope per hour (the metric's unit), that slope as a share of the windows' mean, its
    standard error, the change it makes over the soak, and whether that is drift."""

    slope_per_h: float
    relative_per_h: float
    stderr_per_h: float
    change: float
    drifted: bool


def fit(hours: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """The least-squares slope of ``values`` against ``hours`` (windows without a value left out) and its standard
    error; NaN, NaN with fewer than three points."""
    known = ~np.isnan(values)
    x, y = hours[known], values[known]
    if len(x) < 3 or np.ptp(x) == 0:
        return math.nan, math.nan
    slope, intercept = np.polyfit(x, y, 1)
    residuals = y - (slope * x + intercept)
    stderr = math.sqrt(float(residuals @ residuals) / (len(x) - 2) / float(((x - x.mean()) ** 2).sum()))
    return float(slope), stderr


def drift(rule: DriftRule, hours: np.ndarray, values: np.ndarray) -> Drift:
    """``values`` (one per window, NaN where none) at window middles ``hours`` (since the soak's start) judged by
    ``rule``."""
    slope, stderr = fit(hours, values)
    mean = float(np.nanmean(values)) if not np.isnan(values).all() else math.nan
    relative = slope / mean if mean else math.nan
    change = (relative if rule.relative else slope) * float(np.ptp(hours)) if len(hours) else math.nan
    per_hour = relative if rule.relative else slope
    drifted = bool(
        rule.worse * per_hour > rule.per_hour
        and abs(slope) >= SIGNIFICANCE * stderr
        and rule.worse * change > rule.floor
    )
    return Drift(slope, relative, stderr, change, drifted)


def verdict(rule: DriftRule, result: Drift, unit: str = "") -> str:
    """One line: "TTFT p99 grew 18 % per hour", "server RSS +2.0 GiB/h", or "<label>: no drift"."""
    if not result.drifted:
        return f"{rule.label}: no drift"
    if rule.relative:
        way = "grew" if result.slope_per_h > 0 else "fell"
        return f"{rule.label} {way} {abs(result.relative_per_h) * 100:.0f} % per hour"
    if unit == "MiB":
        gib = result.slope_per_h / 1024
        return f"{rule.label} {gib:+.1f} GiB/h" if abs(gib) >= 1 else f"{rule.label} {result.slope_per_h:+.0f} MiB/h"
    return f"{rule.label} {result.slope_per_h * 100:+.1f} points per hour"
