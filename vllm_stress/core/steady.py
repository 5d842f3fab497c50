"""When a level's numbers mean something: the steady-state rule, used live by the ramp (``--step-time auto``) and
by the analysis (each level's ``steady`` and ``steady_reason``); docs/concepts/metrics.md explains it."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from vllm_stress.core.metrics import in_window, mean_in_flight, streamed_tokens

MIN_LIFETIMES = 3.0
MIN_PER_HALF = 5
RATE_TOLERANCE = 0.10
LATENCY_TOLERANCE = 0.20
NOISE_Z = 3.0


@dataclass(frozen=True)
class Requests:
    """The requests a verdict looks at, one array entry each (unix seconds).

    ``start``, ``end``, ``first`` (first token, the start when none) and ``tokens`` (output tokens received) are of
    every request that may overlap the window, whatever its level: they make the tok/s and in-flight figures.
    ``measured`` marks the level's own measured requests, whose ``e2e`` and ``ttft`` (NaN when none) are compared.
    """

    start: np.ndarray
    end: np.ndarray
    first: np.ndarray
    tokens: np.ndarray
    measured: np.ndarray
    e2e: np.ndarray
    ttft: np.ndarray


@dataclass(frozen=True)
class Verdict:
    steady: bool
    reason: str
    lifetimes: float  # window length / e2e p50 of the measured requests (NaN without any)
    e2e_p50_s: float

    @property
    def hold_needed_s(self) -> float:
        """The shortest hold that can be steady at this level's e2e p50 (after a warm-up of one lifetime)."""
        return MIN_LIFETIMES * self.e2e_p50_s


def judge(a: float, b: float, requests: Requests) -> Verdict:
    """The verdict on the window ``[a, b)`` (see the module docstring)."""
    ended = requests.measured & in_window(requests.end, a, b)
    if not ended.any():
        return Verdict(False, "no measured request of the level ended in the window", math.nan, math.nan)
    e2e_p50 = float(np.median(requests.e2e[ended]))
    lifetimes = (b - a) / e2e_p50 if e2e_p50 > 0 else math.inf
    if lifetimes < MIN_LIFETIMES:
        return Verdict(
            False,
            f"the {b - a:.0f} s window holds {lifetimes:.1f} request lifetimes (e2e p50 "
            f"{seconds(e2e_p50)}); steady needs {MIN_LIFETIMES:.0f}",
            lifetimes,
            e2e_p50,
        )
    reason = halves_disagree(a, b, requests, ended, e2e_p50)
    if reason:
        return Verdict(False, reason, lifetimes, e2e_p50)
    return Verdict(True, f"the window's halves agree over {lifetimes:.1f} request lifetimes", lifetimes, e2e_p50)


def halves_disagree(a: float, b: float, requests: Requests, ended: np.ndarray, e2e_p50: float) -> str:
    """Why the window's two halves differ, or "" when they agree."""
    mid = (a + b) / 2
    first_half, second_half = ended & in_window(requests.end, a, mid), ended & in_window(requests.end, mid, b)
    n1, n2 = int(first_half.sum()), int(second_half.sum())
    if min(n1, n2) < MIN_PER_HALF:
        return f"only {min(n1, n2)} measured requests ended in one half of the window (at least {MIN_PER_HALF})"
    tolerance = max(RATE_TOLERANCE, NOISE_Z * math.sqrt(n1 + n2) / ((n1 + n2) / 2))
    if abs(n2 - n1) > tolerance * (n1 + n2) / 2:
        return f"completions {moved(n1, n2)} {n1} → {n2} between the window's halves"
    tokens = [
        streamed_tokens(requests.first, requests.end, requests.tokens, lo, hi) / (hi - lo)
        for lo, hi in ((a, mid), (mid, b))
    ]
    if abs(tokens[1] - tokens[0]) > tolerance * max(tokens):
        return f"output tok/s {moved(*tokens)} {tokens[0]:,.0f} → {tokens[1]:,.0f} across the window"
    for name, values in (("e2e", requests.e2e), ("TTFT", requests.ttft)):
        m1, m2 = median(values[first_half]), median(values[second_half])
        if abs(m2 - m1) > LATENCY_TOLERANCE * e2e_p50:
            return f"{name} p50 {moved(m1, m2)} {seconds(m1)} → {seconds(m2)} across the window"
    flight = [mean_in_flight(requests.start, requests.end, lo, hi) for lo, hi in ((a, mid), (mid, b))]
    if abs(flight[1] - flight[0]) > tolerance * max(flight):
        return f"requests in flight {moved(*flight)} {flight[0]:.0f} → {flight[1]:.0f} across the window"
    return ""


def median(values: np.ndarray) -> float:
    """The median of the values that are not NaN (NaN when none: such a check is skipped)."""
    present = values[~np.isnan(values)]
    return float(np.median(present)) if present.size else math.nan


def moved(before: float, after: float) -> str:
    return "rose" if after > before else "fell"


def seconds(value: float) -> str:
    return f"{value:.1f} s" if value >= 1 else f"{value * 1000:.0f} ms"
