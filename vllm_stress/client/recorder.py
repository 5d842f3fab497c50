"""Every request's row in the process that ran it: requests in flight, rows and ITL counts, a worker's deltas."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any

import gevent

from vllm_stress.client.exchange import Exchange
from vllm_stress.client.workingset import LIVE
from vllm_stress.core import schema

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.rpc.protocol import Message
    from locust.runners import Runner, WorkerRunner

LEVEL_MESSAGE = "vllm_stress_level"  # master -> workers: {"users": int, "measuring": bool, "contexts": int | None}
LEVEL_REQUEST = "vllm_stress_level_request"  # worker -> master: send me the current level
FLUSH_MESSAGE = "vllm_stress_flush"  # master -> workers: stop and send your last rows now
ROWS_MESSAGE = "vllm_stress_rows"  # worker -> master: a delta sent outside the regular reports
REPORT_KEY = "vllm_stress"  # the delta's key in a worker report


class Recorder:
    """The requests of one process: those in flight, and the rows and ITL counts of those that ended."""

    def __init__(self, environment: Environment, worker_id: str) -> None:
        assert environment.runner is not None  # the recorder is made at init, after the runner
        self.environment = environment
        self.runner: Runner = environment.runner
        self.worker_id = worker_id
        self.level = 0
        self.measuring = True  # a hold is on (or there are no phases): inter-token gaps are kept
        self.in_flight: set[Exchange] = set()  # this process's requests being sent or read
        self.itl: dict[int, Counter[float]] = defaultdict(Counter)

    def set_level(self, users: int, measuring: bool | None = None) -> None:
        """Stamp ``users`` on the rows of requests that start from now on, and say whether a hold is on
        (``measuring``; unchanged when None)."""
        self.level, self.measuring = users, self.measuring if measuring is None else measuring

    def started(self, exchange: Exchange) -> None:
        """A request is being sent: it is in flight until ``record``."""
        self.in_flight.add(exchange)

    def in_flight_now(self) -> list[list[float]]:
        """[start, first token or start, chunks received] (unix seconds) of this process's requests in flight."""
        return [exchange.progress() for exchange in self.in_flight]

    def record(self, exchange: Exchange) -> None:
        """Account for one finished request (successful or not)."""
        self.in_flight.discard(exchange)
        if self.measuring and exchange.measured:
            self.itl[exchange.users].update(map(schema.latency_bucket_ms, exchange.gaps))  # Counter's C loop
        side = {schema.ANSWERS_FILE: [exchange.answer_row(self.worker_id)]} if exchange.canary else {}
        self.keep([exchange.row(self.worker_id)], side)

    def record_task(self, row: list[Any]) -> None:
        """Account for one finished agent task (its ``tasks.csv`` row)."""
        self.keep([], {schema.TASKS_FILE: [row]})

    def keep(self, rows: list[list[Any]], side: dict[str, list[list[Any]]]) -> None:
        """Write or ship finished requests' rows and the rows of the files beside them (``schema.SIDE_FILES``:
        canaries' answers, agent tasks), by file name."""
        raise NotImplementedError


class WorkerRecorder(Recorder):
    """A worker's rows, shipped to the master with each worker report."""

    runner: WorkerRunner

    def __init__(self, environment: Environment, client_id: str) -> None:
        super().__init__(environment, client_id)
        self.pending_rows: list[list[Any]] = []
        self.pending_side: dict[str, list[list[Any]]] = defaultdict(list)
        environment.events.report_to_master.add_listener(self._ship)
        environment.events.quitting.add_listener(self._flush)  # quitting by itself (SIGTERM, Ctrl-C, master gone)
        self.runner.register_message(LEVEL_MESSAGE, self._on_level_message)
        self.runner.register_message(FLUSH_MESSAGE, self._flush)
        # ask for the current level now that the handler is there: Locust fires init only after the worker has
        # connected, so a message the master sent at once on connect would arrive before it (and be dropped).
        # Sent from a greenlet: a send that yields inside init lets the spawn message in before init is done.
        gevent.spawn(self.runner.send_message, LEVEL_REQUEST)

    def keep(self, rows: list[list[Any]], side: dict[str, list[list[Any]]]) -> None:
        self.pending_rows += rows
        for file, side_rows in side.items():
            self.pending_side[file] += side_rows

    def delta(self, final: bool) -> dict[str, Any]:
        """The rows and ITL counts since the last delta, and what the requests in flight streamed so far."""
        delta = {
            "rows": self.pending_rows,
            "side": dict(self.pending_side),
            "itl": {u: dict(h) for u, h in self.itl.items()},
            "final": final,
            "time": time.time(),
            "in_flight": self.in_flight_now(),
        }
        self.pending_rows = []
        self.pending_side = defaultdict(list)
        self.itl = defaultdict(Counter)
        return delta

    def _ship(self, client_id: str, data: dict[str, Any], **_kw: object) -> None:
        data[REPORT_KEY] = self.delta(final=False)

    def _on_level_message(self, environment: Environment, msg: Message, **_kw: object) -> None:
        self.set_level(int(msg.data["users"]), bool(msg.data["measuring"]))
        LIVE.count = msg.data.get("contexts")  # a working-set sweep's level (vllm_stress.client.workingset)

    def _flush(self, *_args: object, **_kw: object) -> None:
        """Stop the users (the rows of requests in flight say Aborted) and send every row now, marked final: Locust
        sends a final report only when the master asks a worker to quit, and gives it 0.5 s."""
        self.runner.stop()
        self.runner.send_message(ROWS_MESSAGE, self.delta(final=True))
