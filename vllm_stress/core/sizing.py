"""How many Locust worker processes a load needs, from the client's measured CPU per streamed token: the rule
``python -m scenarios plan`` and the report's client-bound levels share."""

from __future__ import annotations

import math

# CPU a worker process spends per streamed token (one SSE event each), measured at 1,000 streams: the median of
# benchmarks/client.md's runs.
CLIENT_CPU_US_PER_TOKEN = 24.4
# A worker process's CPU budget: token timestamps stay accurate while its event loop is mostly idle (Locust itself
# warns at 90 %, and TTFT tails inflate well before that).
TIMING_CPU_PERCENT = 50.0


def cores_for(tokens_per_s: float) -> float:
    """Cores of client CPU that streaming ``tokens_per_s`` in total takes."""
    return tokens_per_s * CLIENT_CPU_US_PER_TOKEN / 1e6


def worker_processes(tokens_per_s: float) -> int:
    """Worker processes that keep each under TIMING_CPU_PERCENT while streaming ``tokens_per_s`` in total."""
    return max(1, math.ceil(cores_for(tokens_per_s) * 100 / TIMING_CPU_PERCENT - 1e-9))


def machine_processes(processes: int, cores_per_machine: int) -> list[int]:
    """The ``--processes`` of each worker machine that runs ``processes`` in all, one per core, the fewest machines:
    their sum is the master's ``--expect-workers``, so the two never disagree (``vllm-stress plan`` prints them, and
    the docs' figures come from here)."""
    full, rest = divmod(processes, cores_per_machine)
    return [cores_per_machine] * full + ([rest] if rest else [])
