"""The SLO search's walk (vllm_stress/scenarios/search/bisection.py): bracket by doubling, then bisect."""

from __future__ import annotations

from dataclasses import dataclass

from vllm_stress.scenarios.search.bisection import bracket, next_load
from vllm_stress.scenarios.search.space import Space


@dataclass
class Verdict:
    load: float
    passed: bool


def walk(space: Space, capacity: float) -> tuple[list[float], dict[float, Verdict]]:
    """Every load the walk probes against a server that passes up to ``capacity``."""
    probes: dict[float, Verdict] = {}
    steps = []
    while (load := next_load(probes, space)) is not None:
        assert len(steps) < 50, steps
        steps.append(load)
        probes[load] = Verdict(load, load <= capacity)
    return steps, probes


def test_users_bracket_then_bisect_to_one_user():
    steps, probes = walk(Space("users", 4, 128, 0.1), 37)
    assert steps == [4, 8, 16, 32, 64, 48, 40, 36, 38]
    best, above = bracket(probes)
    assert best is not None and above is not None and (best.load, above.load) == (36, 38)


def test_rates_bracket_then_bisect_to_the_precision():
    steps, probes = walk(Space("rate", 2.0, 512.0, 0.1), 37.5)
    assert steps[:7] == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 48.0]
    best, above = bracket(probes)
    assert best is not None and above is not None
    assert best.load <= 37.5 < above.load and above.load - best.load <= 0.1 * best.load


def test_a_failing_low_end_or_a_passing_high_end_ends_the_walk():
    assert walk(Space("users", 4, 128, 0.1), 1) == ([4], {4: Verdict(4, False)})
    steps, probes = walk(Space("users", 4, 20, 0.1), 1000)
    assert steps == [4, 8, 16, 20] and bracket(probes) == (Verdict(20, True), None)


def test_the_bracket_is_the_highest_pass_and_the_lowest_fail_above_it():
    probes = {
        load: Verdict(load, passed) for load, passed in ((2, False), (4, True), (16, False), (8, True), (32, False))
    }
    assert bracket(probes) == (Verdict(8, True), Verdict(16, False))
    assert bracket({}) == (None, None)
    assert bracket({4: Verdict(4, False)}) == (None, Verdict(4, False))
