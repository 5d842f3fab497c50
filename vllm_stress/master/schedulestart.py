"""One start for a schedule sent by several workers (``--trace``, ``--arrival-rate``): each worker tells the master
when its arrival clock is ready, the master sends every worker the same start, ``START_LEAD_S`` after the last is
ready, in unix seconds, and each worker counts its schedule from it. Workers on the master's host read one wall clock;
workers on other hosts rely on NTP keeping theirs with the master's, so each worker also estimates its clock's offset
from the master's with the round trip of the two messages (as NTP does), and run.json's ``schedule_start`` holds the
offsets and their spread: how far apart the workers' schedules may be."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

import gevent
from locust.runners import MasterRunner, WorkerRunner

from vllm_stress.client.pacing import Schedule

if TYPE_CHECKING:
    import argparse

    from locust.env import Environment
    from locust.rpc.protocol import Message

    from vllm_stress.master.runfiles import RunFiles

log = logging.getLogger(__name__)

READY_MESSAGE = "vllm_stress_schedule_ready"  # worker -> master: {"sent": its unix time}
START_MESSAGE = "vllm_stress_schedule_start"  # master -> worker: {"start", "ready_received", "sent"}
STARTED_MESSAGE = "vllm_stress_schedule_started"  # worker -> master: {"offset_s", "round_trip_s", "ahead_s"}
START_LEAD_S = 1.0  # the start is this long after the last worker is ready: time for the message to reach them all
READY_TIMEOUT_S = 120.0  # the master starts the schedule without the workers not ready by then (logged)


def scheduled(options: argparse.Namespace) -> bool:
    """Whether the run sends on a schedule (the master starts it) rather than as a closed loop."""
    return bool(options.trace or options.arrival_rate or getattr(options, "microburst", ""))


def clock_offset(sent: float, received_there: float, sent_there: float, received: float) -> tuple[float, float]:
    """NTP's estimate from one exchange: (the other clock minus this one, round trip); this clock's ``sent`` and
    ``received``, the other's ``received_there`` and ``sent_there``. The offset is within half the round trip."""
    offset = ((received_there - sent) + (sent_there - received)) / 2
    return offset, (received - sent) - (sent_there - received_there)


class WorkerStart:
    """A worker's side: ``ready`` once its arrival clock is made (or its preparation failed: no clock), then the
    master's start sets the clock's start and the worker reports its offset."""

    def __init__(self, runner: WorkerRunner) -> None:
        self.runner = runner
        self.schedule: Schedule | None = None
        self.ready_sent = 0.0
        runner.register_message(START_MESSAGE, self.on_start)

    def ready(self, schedule: Schedule | None) -> None:
        self.schedule = schedule
        self.ready_sent = time.time()
        self.runner.send_message(READY_MESSAGE, {"sent": self.ready_sent})

    def on_start(self, environment: Environment, msg: Message, **_kw: object) -> None:
        received, perf_now = time.time(), time.perf_counter()
        start = msg.data["start"]
        if self.schedule:
            self.schedule.start_at(perf_now + start - received)  # on this host's clock, as it reads the master's
        offset, round_trip = clock_offset(self.ready_sent, msg.data["ready_received"], msg.data["sent"], received)
        if start < received:
            log.warning(
                "The schedule's start came %.0f ms after it: its first arrivals are late", 1000 * (received - start)
            )
        report = {"offset_s": offset, "round_trip_s": round_trip, "ahead_s": start - received}
        self.runner.send_message(STARTED_MESSAGE, report)


class MasterStart:
    """The master's side: the start sent once every worker is ready (or READY_TIMEOUT_S after the test starts), to a
    worker ready later at once; the workers' reports into run.json's ``schedule_start``."""

    def __init__(self, environment: Environment, runner: MasterRunner, run: RunFiles) -> None:
        self.runner = runner
        self.run = run
        self.ready: dict[str, tuple[float, float]] = {}  # worker -> (its "sent", when the master received it)
        self.start: float | None = None
        self.reports: dict[str, dict[str, float]] = {}
        self.timer: gevent.Greenlet[[], None] | None = None
        runner.register_message(READY_MESSAGE, self.on_ready)
        runner.register_message(STARTED_MESSAGE, self.on_started)
        environment.events.test_start.add_listener(self.on_test_start)
        environment.events.test_stop.add_listener(self.on_test_stop)

    def on_test_start(self, environment: Environment, **_kw: object) -> None:
        self.ready.clear()
        self.reports.clear()
        self.start = None
        assert environment.parsed_options is not None
        if scheduled(environment.parsed_options):
            self.timer = gevent.spawn_later(READY_TIMEOUT_S, self.start_schedule)

    def on_test_stop(self, **_kw: object) -> None:
        if self.timer:
            self.timer.kill(block=False)

    def on_ready(self, environment: Environment, msg: Message, **_kw: object) -> None:
        self.ready[msg.node_id] = (msg.data["sent"], time.time())
        if self.start is not None:
            self.send(msg.node_id)
        elif len(self.ready) >= self.runner.worker_count:
            self.start_schedule()

    def start_schedule(self) -> None:
        if self.start is not None:
            return
        if len(self.ready) < self.runner.worker_count:
            log.warning(
                "%d of %d workers ready after %.0f s: the schedule starts without the others",
                len(self.ready),
                self.runner.worker_count,
                READY_TIMEOUT_S,
            )
        self.start = time.time() + START_LEAD_S
        for worker in self.ready:
            self.send(worker)

    def send(self, worker: str) -> None:
        _, ready_received = self.ready[worker]
        message = {"start": self.start, "ready_received": ready_received, "sent": time.time()}
        self.runner.send_message(START_MESSAGE, message, client_id=worker)

    def on_started(self, environment: Environment, msg: Message, **_kw: object) -> None:
        self.reports[msg.node_id] = msg.data
        self.run.update({"schedule_start": schedule_start(self.start, self.reports)})


def schedule_start(start: float | None, reports: dict[str, dict[str, float]]) -> dict[str, Any]:
    """run.json's ``schedule_start``: the start (unix seconds), each worker's clock offset from the master's, the
    round trip it was estimated over and how long before the start the worker had it (ms), and ``skew_ms``, the
    spread of the offsets: how far apart two workers' schedules may be, within half the largest round trip."""
    offsets = [report["offset_s"] for report in reports.values()]
    return {
        "start": start,
        "workers": {
            worker: {
                "clock_offset_ms": round(1000 * report["offset_s"], 3),
                "round_trip_ms": round(1000 * report["round_trip_s"], 3),
                "ahead_ms": round(1000 * report["ahead_s"], 3),
            }
            for worker, report in sorted(reports.items())
        },
        "skew_ms": round(1000 * (max(offsets) - min(offsets)), 3),
    }
