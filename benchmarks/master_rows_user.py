"""Locustfile of benchmarks/master_rows.py: a synthetic user that sends no request and hands its worker's recorder
``requests.csv`` rows at a set rate, as a worker running real users would (the rows travel to the master with the
worker's reports, through the suite's own WorkerRecorder); the worker also keeps ``--bench-in-flight`` requests in
flight (their progress goes with every report, as real streams' does) and writes, at quit, how late its master's
heartbeat replies came (``--bench-out``).

Not for a real test: it exists to load the master."""

from __future__ import annotations

import json
import os
import random
import time
from typing import Any

import gevent
from locust import User, events, task
from locust.runners import STATE_RUNNING, WorkerRunner

from vllm_stress.client.exchange import new_request_id
from vllm_stress.users import plugin  # noqa: F401 (the suite's options and recorders)
from vllm_stress.users.target import TARGETS

TICK_S = 0.1  # a user hands its rows over every TICK_S
_gaps: list[float] = []  # seconds between two heartbeat replies from the master, on a worker


@events.init_command_line_parser.add_listener
def _options(parser: Any, **_kw: object) -> None:
    parser.add_argument("--bench-rows-per-s", type=float, default=1000.0, help="rows per second of each user")
    parser.add_argument("--bench-in-flight", type=int, default=0, help="requests in flight on each worker")
    parser.add_argument("--bench-out", default="", help="a folder for each worker's heartbeat gaps (JSON)")


class InFlight:
    """A request in flight as the recorder sees one: its progress (start, first token, chunks)."""

    def __init__(self, start: float) -> None:
        self.start = start

    def progress(self) -> list[float]:
        return [self.start, self.start + 0.05, int(time.time() - self.start)]


def row(worker: str, users: int, now: float, rng: random.Random) -> list[Any]:
    """A successful 200-token chat row with the value types and sizes of a real one (Exchange.row)."""
    ttft = rng.uniform(0.02, 0.4)
    tpot = rng.uniform(0.01, 0.05)
    e2e = ttft + 199 * tpot
    start = now - e2e
    return [round(start, 6), round(now, 6), round(ttft, 6), round(tpot, 6), round(e2e, 6), 200, 32, 200, 32, 200]+[
        0, 1, "", 200, "length", users, worker, "chat", round(rng.uniform(0, 0.002), 6), "",
        new_request_id(), "", "", round(ttft, 6), "", "", 0, 0, 0, "",
    ]  # fmt: skip


class RowUser(User):
    """Hands ``--bench-rows-per-s`` rows a second to the worker's recorder, in batches every TICK_S."""

    def on_start(self) -> None:
        target = TARGETS[self.environment]
        target.prepared.wait()
        self.recorder = target.recorder
        self.rng = random.Random(id(self))
        options = self.environment.parsed_options
        assert options is not None
        self.per_tick = options.bench_rows_per_s * TICK_S
        self.owed = 0.0

    @task
    def hand_rows(self) -> None:
        self.owed += self.per_tick
        count, self.owed = int(self.owed), self.owed - int(self.owed)
        now, worker, users = time.time(), self.recorder.worker_id, self.recorder.level
        self.recorder.keep([row(worker, users, now, self.rng) for _ in range(count)], [])
        gevent.sleep(TICK_S)


@events.init.add_listener
def _on_init(environment: Any, **_kw: object) -> None:
    runner = environment.runner
    options = environment.parsed_options
    if not isinstance(runner, WorkerRunner):
        return
    recorder = TARGETS[environment].recorder
    now = time.time()
    recorder.in_flight.update(InFlight(now - i % 600) for i in range(options.bench_in_flight))  # type: ignore[misc]
    last = [0.0]

    def heard(client_id: str, timestamp: float, **_kw: object) -> None:
        if last[0] and runner.state == STATE_RUNNING:  # from the users' start on
            _gaps.append(timestamp - last[0])
        last[0] = timestamp

    def save(**_kw: object) -> None:
        if options.bench_out:
            with open(os.path.join(options.bench_out, f"worker-{os.getpid()}.json"), "w") as file:
                json.dump({"heartbeat_gaps_s": _gaps}, file)

    environment.events.heartbeat_received.add_listener(heard)
    environment.events.quitting.add_listener(save)
