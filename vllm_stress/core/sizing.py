"""How many Locust worker processes a load needs, from the client's measured CPU per streamed token: the rule
``python -m scenarios plan`` and the report's client-bound levels share."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Measured:
    """A capacity measured by a benchmark: ``value`` in ``unit``, what it is, and where its command and machine are
    written down (``source``). ``plan`` and the generated docs read these, so the two never disagree."""

    value: float
    unit: str
    what: str
    source: str


MEASURED = {
    "cpu_per_token": Measured(
        31.5,
        "us",
        "client CPU per token, 200-token answers, a server writing each token on its own (as vLLM's API server does)",
        "benchmarks/scale.md",
    ),
    "cpu_per_token_simulator": Measured(
        25.5,
        "us",
        "client CPU per token, 200-token answers, the simulator (its driver writes a step at once)",
        "benchmarks/scale.md",
    ),
    "cpu_per_stream_second": Measured(
        8.1, "us", "client CPU per open stream-second, tokens apart", "benchmarks/scale.md"
    ),
    "rss_per_stream": Measured(36.0, "KiB", "worker memory (RSS) per open stream", "benchmarks/scale.md"),
    "fds_per_stream": Measured(1.0, "", "worker descriptors per stream and replica", "benchmarks/scale.md"),
    "streams_per_worker": Measured(5000, "", "streams one worker held (20,000 in all)", "benchmarks/scale.md"),
    "master_cpu_per_row": Measured(23.4, "us", "master CPU per request row", "benchmarks/scale.md"),
}
# CPU a worker process spends per streamed token (one SSE event each, requests starting and ending), against the
# costlier of the servers measured: sizing must hold against a real vLLM.
CLIENT_CPU_US_PER_TOKEN = MEASURED["cpu_per_token"].value
# A worker process's CPU budget: token timestamps stay accurate while its event loop is mostly idle (Locust itself
# warns at 90 %, and TTFT tails inflate well before that).
TIMING_CPU_PERCENT = 50.0


def cores_for(tokens_per_s: float, us_per_token: float = CLIENT_CPU_US_PER_TOKEN) -> float:
    """Cores of client CPU that streaming ``tokens_per_s`` in total takes, at ``us_per_token``."""
    return tokens_per_s * us_per_token / 1e6


def worker_processes(tokens_per_s: float, users: int = 0) -> int:
    """Worker processes that keep each under TIMING_CPU_PERCENT while streaming ``tokens_per_s`` in total over
    ``users`` open streams (their CPU per stream-second included), and each with at most the measured streams per
    worker."""
    cores = cores_for(tokens_per_s) + users * MEASURED["cpu_per_stream_second"].value / 1e6
    by_cpu = math.ceil(cores * 100 / TIMING_CPU_PERCENT - 1e-9)
    return max(1, by_cpu, math.ceil(users / MEASURED["streams_per_worker"].value))


def machine_processes(processes: int, cores_per_machine: int) -> list[int]:
    """The ``--processes`` of each worker machine that runs ``processes`` in all, one per core, the fewest machines:
    their sum is the master's ``--expect-workers``, so the two never disagree (``vllm-stress plan`` prints them, and
    the docs' figures come from here)."""
    full, rest = divmod(processes, cores_per_machine)
    return [cores_per_machine] * full + ([rest] if rest else [])


def stream_lines(users: int, processes: int, rows_per_s: float) -> list[str]:
    """What ``users`` streams over ``processes`` worker processes cost besides CPU per token, from MEASURED: memory
    and descriptors per process, the CPU of a server writing each token on its own, and the master's share of a core
    for ``rows_per_s`` request rows (0: not given)."""
    share = math.ceil(users / processes)
    rss, fds, row = MEASURED["rss_per_stream"], MEASURED["fds_per_stream"], MEASURED["master_cpu_per_row"]
    idle = MEASURED["cpu_per_stream_second"]
    lines = [
        f"open streams: {users:,} x {idle.value:g} {idle.unit} per second = {users * idle.value / 1e6:.2f} cores more",
        f"each worker process: {share:,} streams x {rss.value:g} {rss.unit} = {share * rss.value / 1024:,.0f} MiB "
        f"more memory, {share * fds.value:,.0f} more file descriptors per replica it sends to (ulimit -n)",
    ]
    if rows_per_s > 0:
        lines.append(
            f"master: {rows_per_s:,.0f} rows/s x {row.value:g} {row.unit} = {rows_per_s * row.value / 1e4:.0f} % "
            f"of a core ({1e6 / row.value:,.0f} rows/s at most)"
        )
    return lines
