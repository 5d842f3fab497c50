"""search.md (vllm_stress/scenarios/search/writeup.py): the answer, its uncertainty, the probe table and the notes."""

from __future__ import annotations

import math

from vllm_stress.core.slo import Slo
from vllm_stress.scenarios.search.space import Space
from vllm_stress.scenarios.search.writeup import markdown, value_text

E2E = Slo("e2e_p50", "e2e_p50_s", 0.3)
SUCCESS = Slo("success", "success_rate", 0.999)
USERS = Space("users", 1, 64, 0.1)
RATE = Space("rate", 1.0, 64.0, 0.1, pool_seconds=2.5)


def probe(load: float, users: int, passed: bool, e2e: float, lag: float = 0.0, ci95: float | None = None) -> dict:
    return {
        "load": load,
        "users": users,
        "passed": passed,
        "steady": True,
        "reason": "" if passed else "misses e2e_p50 ≤ 300 ms",
        "values": {"e2e_p50": e2e, "success": 1.0, "output_tokens_per_s": 12345.6, "schedule_lag_p99_s": lag},
        "ci95": {} if ci95 is None else {"e2e_p50": ci95},
        "runs": 1,
        "missed": [] if passed else ["e2e_p50"],
    }


def result(
    probes: list[dict], answer: float | None, above: float | None, repeats: int = 1, finished: bool = True
) -> dict:
    binding = None
    if above is not None:
        binding = {"slo": "e2e_p50", "limit": 0.3, "answer_value": 0.25, "answer_ci95": 0.0123, "above_value": 0.45}
        binding["above_ci95"] = None
    return {
        "slo": [
            {"name": "e2e_p50", "field": "e2e_p50_s", "limit": 0.3},
            {"name": "success", "field": "success_rate", "limit": 0.999},
        ],
        "probes": probes,
        "answer": answer,
        "next_failing": above,
        "failing_reason": "misses e2e_p50 ≤ 300 ms" if above is not None else "",
        "binding": binding,
        "finished": finished,
        "repeats": repeats,
    }


def test_a_closed_loop_write_up():
    text = markdown(result([probe(32, 32, True, 0.25), probe(64, 64, False, 0.45)], 32, 64), [E2E, SUCCESS], USERS)
    assert text.startswith("# SLO search\n\nSLOs: e2e_p50 ≤ 300 ms, success ≥ 99.90%.\n\n")
    assert (
        "The highest concurrency that meets every SLO: **32 users** (64 users does not: misses e2e_p50 ≤ 300 ms)."
    ) in text
    assert (
        "Uncertainty: the capacity lies between 32 users (passes) and 64 users. The binding SLO is e2e_p50 ≤ 300 ms: "
        "250.0 ms ± 12.3 ms at the answer, 450.0 ms above it."
    ) in text
    assert "| Users | Runs | Steady | Output tok/s | e2e_p50 | success | Verdict |" in text
    assert "| 32 | 1 | yes | 12,346 | 250.0 ms | 1.0000 | passes |" in text
    assert "| 64 | 1 | yes | 12,346 | 450.0 ms | 1.0000 | misses e2e_p50 ≤ 300 ms |" in text
    assert "Each probe ran" not in text and "Open loop" not in text and text.endswith("|\n")


def test_an_open_loop_write_up_with_repeats():
    probes = [probe(2.0, 5, True, 0.25, lag=0.0042, ci95=0.01)]
    text = markdown(result(probes, 2.0, None, repeats=3, finished=False), [E2E], RATE)
    assert "**2 req/s (5 users)** (search not finished: raise --max-probes)." in text
    assert "and nothing failed yet." in text
    assert "| Rate (req/s) | Users (pool) | Arrival wait p99 | Runs |" in text
    assert "| 2 | 5 | 4.2 ms | 1 | yes | 12,346 | 250.0 ms ± 10.0 ms | passes |" in text
    assert "Each probe ran 3 times; a value is the mean of its runs ± the half-width" in text
    assert "carried by ceil(rate × 2.5 s) users (--pool-seconds); a probe whose arrivals waited 1 s (p99)" in text


def test_no_answer():
    text = markdown(result([probe(1.0, 3, False, 0.45)], None, 1.0), [E2E], RATE)
    assert "No probed arrival rate met every SLO." in text and "Uncertainty" not in text


def test_a_value_reads_as_its_limit_does():
    assert value_text(E2E, 0.12345, None) == "123.5 ms"
    assert value_text(E2E, 0.12345, 0.001) == "123.5 ms ± 1.0 ms"
    assert value_text(E2E, None, math.nan) == "-"
    assert value_text(SUCCESS, 0.99876, 0.00012) == "0.9988 ± 0.0001"
    assert value_text(SUCCESS, math.nan, None) == "-"
