"""The SLO search's walk over a Space: the next load to probe (bracket by doubling, then bisect) and the bracket the
probes so far make."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

from vllm_stress.scenarios.search.space import Space


class Verdict(Protocol):
    """What the walk reads of a judged probe."""

    load: float
    passed: bool


JudgedProbe = TypeVar("JudgedProbe", bound=Verdict)


def next_load(probes: Mapping[float, Verdict], space: Space) -> float | None:
    """The next load to probe, or None when the answer is found: ``space.low`` first, then double the highest pass
    until a probe fails or ``space.high`` passes, then bisect until the pass and the fail are ``space.precision``
    of the pass apart (over users: at least one user)."""
    passed = [load for load, probe in probes.items() if probe.passed]
    failed = [load for load, probe in probes.items() if not probe.passed]
    best = max(passed, default=None)
    worst = min((load for load in failed if best is None or load > best), default=None)
    if best is None:
        return None if space.low in probes else space.low
    if worst is None:
        return None if best >= space.high else min(best * 2, space.high)
    if worst - best <= max(1 if space.whole else 0, space.precision * best):
        return None
    return (best + worst) // 2 if space.whole else round((best + worst) / 2, 3)


def bracket(probes: Mapping[float, JudgedProbe]) -> tuple[JudgedProbe | None, JudgedProbe | None]:
    """The highest passing probe and the lowest failing one above it (either may be None)."""
    ordered = sorted(probes.values(), key=lambda probe: probe.load)
    best = max((p for p in ordered if p.passed), key=lambda probe: probe.load, default=None)
    above = next((p for p in ordered if not p.passed and (best is None or p.load > best.load)), None)
    return best, above
