"""Open-loop arrivals: requests sent at the times of a renewal process of rate ``--arrival-rate`` whose gaps are
gamma-distributed with shape ``--burstiness`` (1: Poisson), and the start that such a schedule (and a trace's,
vllm_stress.client.trace) counts from."""

from __future__ import annotations

import argparse
import logging
import random
import time

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


class OpenLoopArrivals(Schedule):
    """Arrivals at ``rate_per_s`` whose gaps are gamma-distributed with shape ``burstiness`` and scale
    1/(rate x burstiness), as vLLM's ``vllm/benchmarks/serve.py`` draws them: mean gap 1/rate, coefficient of
    variation 1/sqrt(burstiness); burstiness 1 is a Poisson process (exponential gaps)."""

    def __init__(self, rate_per_s: float, seed: int | None = None, burstiness: float = 1.0) -> None:
        super().__init__()
        if burstiness <= 0:
            raise ValueError(f"--burstiness {burstiness}: above 0")
        self.rate_per_s = rate_per_s
        self.burstiness = burstiness
        self.rng = random.Random(seed)
        self.next_offset = 0.0  # the next arrival, seconds from the start
        self.sent = 0
        self.late = 0
        self.warned = False

    def wait(self) -> float:
        """Sleep until the next arrival time (taken by this caller only); returns how late it is sent: the time the
        arrival waited for a free user, or the process woke late (0 when on time), reported per request as
        ``schedule_lag_s``."""
        arrival = self.start() + self.next_offset
        self.next_offset += self.gap()
        self.sent += 1
        behind = time.perf_counter() - arrival
        if behind > LATE_WARNING_S:
            self.late += 1
            if not self.warned:
                self.warned = True
                log.warning(
                    "Arrivals wait for free users (%.1f s late): the open loop needs more users (-u) "
                    "than arrival rate x e2e latency",
                    behind,
                )
        return sleep_until(arrival)

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
        return (
            f"Open loop: {self.sent} arrivals in {elapsed:.1f} s ({self.sent / elapsed:.2f}/s, asked "
            f"{self.rate_per_s:.2f}/s in this process{bursts}), {self.late} sent over {LATE_WARNING_S:.0f} s late"
        )


def arrivals_for(options: argparse.Namespace, seed: int | None = None) -> OpenLoopArrivals | None:
    """This process's arrival clock for ``--arrival-rate`` and ``--burstiness`` (None: closed loop)."""
    if not options.arrival_rate:
        return None
    workers = max(getattr(options, "expect_workers", 1) or 1, 1) if getattr(options, "worker", False) else 1
    return OpenLoopArrivals(options.arrival_rate / workers, seed, getattr(options, "burstiness", 1.0))
