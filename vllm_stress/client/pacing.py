"""Open-loop arrivals: requests sent at the times of a renewal process of rate ``--arrival-rate`` whose gaps are
gamma-distributed with shape ``--burstiness`` (1: Poisson), microbursts on top of them or alone (``--microburst``: N
requests within M ms every K s, each worker its share), and the start that such a schedule (and a trace's,
vllm_stress.client.trace) counts from."""

from __future__ import annotations

import argparse
import logging
import math
import random
import time
from dataclasses import dataclass

import gevent
import gevent.event

log = logging.getLogger(__name__)

LATE_WARNING_S = 1.0


def sleep_until(due: float) -> float:
    """Sleep until ``time.perf_counter()`` reaches ``due``; returns how late it is now (0 when on time): late because
    the caller came after ``due``, or because a busy process woke it late."""
    if due > time.perf_counter():
        gevent.sleep(due - time.perf_counter())
    return max(time.perf_counter() - due, 0.0)


class Schedule:
    """A schedule's start (``time.perf_counter()``), set once by ``start_at``: the process's own moment in a local
    run, the master's anchor on every worker (vllm_stress.master.schedulestart); its arrivals wait for it."""

    def __init__(self) -> None:
        self.started = 0.0
        self.start_set = gevent.event.Event()

    def start_at(self, started: float) -> None:
        self.started = started
        self.start_set.set()

    def start(self) -> float:
        """The schedule's start, once set (the caller waits until then)."""
        self.start_set.wait()
        return self.started


@dataclass(frozen=True)
class Microburst:
    """``--microburst N,M_MS,K_S``: ``requests`` arrivals evenly spread over ``within_s`` every ``every_s``, the
    first burst ``every_s`` after the schedule's start."""

    requests: int
    within_s: float
    every_s: float

    def run_json(self) -> dict[str, float]:
        return {"requests": self.requests, "within_ms": 1000 * self.within_s, "every_s": self.every_s}


def parse_microburst(text: str) -> Microburst | None:
    """``N,M_MS,K_S`` (e.g. ``32,100,10``) as a Microburst, None for ""; ValueError for anything else."""
    if not text:
        return None
    try:
        requests, within_ms, every_s = text.split(",")
        burst = Microburst(int(requests), float(within_ms) / 1000, float(every_s))
    except ValueError:
        raise ValueError(f"--microburst {text!r}: N,M_MS,K_S, e.g. 32,100,10") from None
    if burst.requests < 1 or burst.within_s < 0 or not burst.within_s < burst.every_s:
        raise ValueError(f"--microburst {text!r}: N at least 1, M ms at least 0 and under K s")
    return burst


class BurstClock:
    """One process's share of the microbursts: of each burst's requests 0..N-1, sent at i x M/N into it, those whose
    index is this worker's modulo the workers (a worker gets none when there are more workers than N)."""

    def __init__(self, burst: Microburst, worker_index: int = 0, workers: int = 1) -> None:
        self.burst = burst
        self.mine = [i for i in range(burst.requests) if i % workers == worker_index % workers]
        self.number = 1  # the burst of the next arrival, from 1
        self.position = 0  # the next of ``mine`` in it

    def next_offset(self) -> float:
        """The next arrival of this share, seconds from the schedule's start (inf: none)."""
        if not self.mine:
            return math.inf
        spacing = self.burst.within_s / self.burst.requests
        return self.number * self.burst.every_s + self.mine[self.position] * spacing

    def take(self) -> tuple[float, int]:
        """The next arrival (offset, its burst's number), advancing past it."""
        offset, number = self.next_offset(), self.number
        self.position += 1
        if self.position == len(self.mine):
            self.number, self.position = self.number + 1, 0
        return offset, number


class OpenLoopArrivals(Schedule):
    """Arrivals at ``rate_per_s`` whose gaps are gamma-distributed with shape ``burstiness`` and scale
    1/(rate x burstiness), as vLLM's ``vllm/benchmarks/serve.py`` draws them: mean gap 1/rate, coefficient of
    variation 1/sqrt(burstiness); burstiness 1 is a Poisson process (exponential gaps). With ``bursts`` its
    microbursts come on top (rate 0: alone); ``burst`` is the burst number of the arrival just taken, None for a
    renewal one (read at once by the same user, before it yields)."""

    def __init__(
        self, rate_per_s: float, seed: int | None = None, burstiness: float = 1.0, bursts: BurstClock | None = None
    ) -> None:
        super().__init__()
        if burstiness <= 0:
            raise ValueError(f"--burstiness {burstiness}: above 0")
        self.rate_per_s = rate_per_s
        self.burstiness = burstiness
        self.rng = random.Random(seed)
        self.bursts = bursts
        self.burst: int | None = None
        self.next_offset = 0.0 if rate_per_s else math.inf  # the next renewal arrival, seconds from the start
        self.sent = 0
        self.late = 0
        self.warned = False

    def wait(self) -> float:
        """Sleep until the next arrival time (taken by this caller only); returns how late it is sent: the time the
        arrival waited for a free user, or the process woke late (0 when on time), reported per request as
        ``schedule_lag_s``."""
        offset, burst = self.take()
        if math.isinf(offset):  # nothing to send in this process (a worker with no share of the bursts): until stopped
            gevent.event.Event().wait()
        arrival = self.start() + offset
        self.sent += 1
        behind = time.perf_counter() - arrival
        if behind > LATE_WARNING_S:
            self.late += 1
            if not self.warned:
                self.warned = True
                log.warning(
                    "Arrivals wait for free users (%.1f s late): the open loop needs more users (-u) "
                    "than arrival rate x the time an arrival holds one (a request's e2e latency, a session's length)",
                    behind,
                )
        lag = sleep_until(arrival)
        self.burst = burst
        return lag

    def take(self) -> tuple[float, int | None]:
        """The next arrival, the renewal process's or a burst's, whichever comes first: (offset, burst number)."""
        if self.bursts and self.bursts.next_offset() <= self.next_offset:
            return self.bursts.take()
        offset = self.next_offset
        self.next_offset += self.gap()
        return offset, None

    def gap(self) -> float:
        """The next gap between arrivals (seconds)."""
        if self.burstiness == 1.0:
            return self.rng.expovariate(self.rate_per_s)
        return self.rng.gammavariate(self.burstiness, 1.0 / (self.rate_per_s * self.burstiness))

    def summary(self) -> str:
        """What this process's open loop did, for the log at test stop."""
        if not self.start_set.is_set():
            return "Open loop: no arrivals (the schedule did not start)"
        elapsed = max(time.perf_counter() - self.started, 1e-9)
        bursts = f", burstiness {self.burstiness:g}" if self.burstiness != 1.0 else ""
        if self.bursts:
            bursts += f", {len(self.bursts.mine)} of each microburst's {self.bursts.burst.requests} requests"
        return (
            f"Open loop: {self.sent} arrivals in {elapsed:.1f} s ({self.sent / elapsed:.2f}/s, asked "
            f"{self.rate_per_s:.2f}/s in this process{bursts}), {self.late} sent over {LATE_WARNING_S:.0f} s late"
        )


def arrivals_for(
    options: argparse.Namespace, seed: int | None = None, worker_index: int = 0
) -> OpenLoopArrivals | None:
    """This process's arrival clock for ``--arrival-rate``, ``--burstiness`` and ``--microburst`` (None: closed
    loop); its options passed vllm_stress.client.checks.validate."""
    burst = parse_microburst(getattr(options, "microburst", ""))
    if not options.arrival_rate and not burst:
        return None
    workers = max(getattr(options, "expect_workers", 1) or 1, 1) if getattr(options, "worker", False) else 1
    bursts = BurstClock(burst, worker_index, workers) if burst else None
    return OpenLoopArrivals((options.arrival_rate or 0.0) / workers, seed, getattr(options, "burstiness", 1.0), bursts)
