"""The recorder of the master or the local runner: the rows of every process into the run folder, and its parts."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import gevent
from locust.runners import STATE_MISSING, MasterRunner

from vllm_stress.client.recorder import FLUSH_MESSAGE, LEVEL_MESSAGE, LEVEL_REQUEST, REPORT_KEY, ROWS_MESSAGE, Recorder
from vllm_stress.client.workingset import LIVE
from vllm_stress.master import hooks, rows
from vllm_stress.master.accounting import RequestAccounting
from vllm_stress.master.leveltimes import LevelTimes
from vllm_stress.master.livestats import LiveStats
from vllm_stress.master.progresslog import LOG_INTERVAL_S, closing_line, progress_line
from vllm_stress.master.runfiles import RunFiles, ServerUnderTest
from vllm_stress.master.runfolder import write_final_locust_csvs

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.rpc.protocol import Message

log = logging.getLogger(__name__)

# how long a stopping master waits for the last rows of workers still alive (a worker that goes missing is not
# waited for): a worker stopping thousands of users on a busy machine takes tens of seconds
FLUSH_TIMEOUT_S = 60.0
WATCH_INTERVAL_S = 1.0
REPORT_LAG_S = 3.0  # worker reports arrive up to WORKER_REPORT_INTERVAL late


class LocalRecorder(Recorder):
    """A single-process run: its own rows straight into the run folder (``run``), with the levels' times
    (``levels``), the count of every request (``accounting``) and the web UI's live figures (``live_stats``)."""

    report_lag_s = 0.0  # how late rows reach this process

    def __init__(self, environment: Environment, server: ServerUnderTest, worker_id: str = "local") -> None:
        super().__init__(environment, worker_id)
        self.run = RunFiles(environment, server)
        self.levels = LevelTimes(environment, self, self.run)
        self.accounting = RequestAccounting()
        self.live_stats = LiveStats(self.report_lag_s, rows.canaries_counted(environment))
        events = environment.events
        events.test_start.add_listener(self._on_test_start)
        events.test_stop.add_listener(self.run.on_test_stop)
        events.quitting.add_listener(self.run.on_quitting)
        events.quit.add_listener(self._on_quit)
        hooks.level_started.add_listener(self.levels.started)
        hooks.level_held.add_listener(self.levels.held)
        hooks.level_ended.add_listener(self.levels.ended)
        hooks.ramp_stopped.add_listener(self._on_ramp_stopped)
        hooks.working_set_changed.add_listener(self._on_working_set_changed)
        hooks.working_set_held.add_listener(self._on_working_set_held)
        gevent.spawn(self._watch)

    def keep(self, rows: list[list[Any]], side: dict[str, list[list[Any]]]) -> None:
        self._write(rows, side=side)

    def _on_ramp_stopped(self, environment: Environment, users: int, reason: str, **_kw: object) -> None:
        """run.json's ``stopped``: the load shape ended the run after the level of ``users`` (--stop-on)."""
        if environment is self.environment:
            self.run.update({"stopped": {"after_users": users, "reason": reason}})

    def _on_working_set_changed(self, environment: Environment, contexts: int | None, **_kw: object) -> None:
        """A working-set sweep's level: this process's prompts draw from its contexts from now on (None: the sweep
        is over)."""
        if environment is self.environment:
            LIVE.count = contexts

    def _on_working_set_held(
        self, environment: Environment, contexts: int, tokens: int, start: float, end: float, **_kw: object
    ) -> None:
        """run.json's ``working_set``: the sweep's levels held so far, each with its window."""
        if environment is self.environment:
            held = {"contexts": contexts, "tokens": tokens, "start": round(start, 3), "end": round(end, 3)}
            self.run.update({"working_set": [*(self.run.meta.get("working_set") or []), held]})

    def _on_test_start(self, **_kw: object) -> None:
        self.accounting.reset()  # before the folder opens: rows may come while run.json is being made
        self.live_stats.clear()
        if self.run.open():
            self.set_level(self.runner.target_user_count)  # set just before test_start; the first users start after

    def _write(
        self, new_rows: list[list[Any]], worker: str | None = None, side: Mapping[str, list[list[Any]]] | None = None
    ) -> None:
        self.accounting.count(new_rows, worker)
        for file, side_rows in (side or {}).items():
            if self.run.folder and side_rows:
                self.run.folder.write_side(file, side_rows)
        if not new_rows:
            return
        self.live_stats.add(new_rows)
        hooks.rows_received.fire(environment=self.environment, rows=new_rows)
        if self.run.folder:
            self.run.folder.write_rows(new_rows)

    def _watch(self) -> None:
        """Every second: follow the target user count (a run without a shape) and report what the requests in
        flight streamed so far; every LOG_INTERVAL_S save the ITL histogram and, without a load shape, log a line."""
        last_log = time.time()
        while True:
            gevent.sleep(WATCH_INTERVAL_S)
            self.levels.follow(self.runner.target_user_count)
            self._each_second()
            if time.time() - last_log >= LOG_INTERVAL_S and self.run.writing:
                last_log = time.time()
                if self.environment.shape_class is None:  # a load shape logs its phases instead, one line each
                    tokens_per_s = self.live_stats.output_tokens_per_s(LOG_INTERVAL_S)
                    log.info("%s", progress_line(self.level, tokens_per_s, self.accounting.totals))
                self.run.save_itl(self.itl)

    def _each_second(self) -> None:
        """What this process's requests in flight streamed so far, for the load shape's live verdict."""
        hooks.in_flight_reported.fire(
            environment=self.environment, source=self.worker_id, report_time=time.time(), entries=self.in_flight_now()
        )

    def account_unreported(self, server_requests: int | None) -> None:
        """Keep in run.json how many requests the server finished in this run, and how many of them have no row."""
        if server_requests is not None and self.run.folder:
            self.accounting.server_requests = server_requests
            self.run.update(self.accounting.run_keys())

    def _on_quit(self, **_kw: object) -> None:
        options = self.environment.parsed_options
        if options is not None and options.csv_prefix:
            write_final_locust_csvs(self.environment, options.csv_prefix)
        self.close_run()

    def close_run(self, complete: bool | None = None) -> None:
        """Write the run's last files and close its folder (at quit; a web-UI run's at its end, ``complete``, as the
        process goes on). Nothing when no folder is open."""
        if not self.run.folder:
            return
        path, now = self.run.folder.path, time.time()
        self.levels.close(now)
        self.run.close(now, self.itl, self.accounting.run_keys(), complete)
        self.itl.clear()  # a web-UI process's next run starts its own histogram
        totals, lost = self.accounting.totals, self.accounting.lost_workers
        log.info("%s", closing_line(path, totals, self.accounting.unaccounted(), lost))


class MasterRecorder(LocalRecorder):
    """The master: the workers' rows from their reports, the level told to them, their last rows at the end, and the
    workers Locust marks missing."""

    report_lag_s = REPORT_LAG_S

    runner: MasterRunner

    def __init__(self, environment: Environment, server: ServerUnderTest) -> None:
        super().__init__(environment, server, "master")
        assert isinstance(self.runner, MasterRunner)
        self.flushed: set[str] = set()  # workers whose last rows the master has
        self.last_heartbeat: dict[str, float] = {}  # worker id -> when the master last heard from it
        environment.events.test_stop.add_listener(self._on_test_stop)
        environment.events.worker_report.add_listener(self._receive)
        environment.events.heartbeat_sent.add_listener(self._on_heartbeat)
        self.runner.register_message(LEVEL_REQUEST, self._on_level_request)
        self.runner.register_message(ROWS_MESSAGE, self._on_rows_message)

    def set_level(self, users: int, measuring: bool | None = None) -> None:
        """... in every process: the workers are told."""
        before = (self.level, self.measuring)
        super().set_level(users, measuring)
        if (self.level, self.measuring) != before:
            self.runner.send_message(LEVEL_MESSAGE, self._level_message())

    def _on_working_set_changed(self, environment: Environment, contexts: int | None, **_kw: object) -> None:
        """... and the workers are told, with the level."""
        super()._on_working_set_changed(environment, contexts)
        if environment is self.environment:
            self.runner.send_message(LEVEL_MESSAGE, self._level_message())

    def _on_level_request(self, environment: Environment, msg: Message, **_kw: object) -> None:
        if self.level:
            self.runner.send_message(LEVEL_MESSAGE, self._level_message(), client_id=msg.node_id)

    def _level_message(self) -> dict[str, Any]:
        return {"users": self.level, "measuring": self.measuring, "contexts": LIVE.count}

    def _on_rows_message(self, environment: Environment, msg: Message, **_kw: object) -> None:
        self._receive(msg.node_id, {REPORT_KEY: msg.data})

    def _receive(self, client_id: str, data: dict[str, Any], **_kw: object) -> None:
        delta = data.get(REPORT_KEY)
        if not delta:
            return
        for users, histogram in delta["itl"].items():
            self.itl[int(users)].update(histogram)
        self._write(delta["rows"], worker=client_id, side=delta.get("side"))
        hooks.in_flight_reported.fire(
            environment=self.environment, source=client_id, report_time=delta["time"], entries=delta["in_flight"]
        )
        if delta.get("final"):
            self.flushed.add(client_id)

    def _each_second(self) -> None:
        """The master runs no users; it names the workers Locust marked missing instead."""
        if self.run.writing:
            self._note_lost_workers()

    def _on_heartbeat(self, client_id: str, timestamp: float, **_kw: object) -> None:
        self.last_heartbeat[client_id] = timestamp

    def _note_lost_workers(self) -> None:
        """Name in run.json each worker that Locust marked missing mid-run (no heartbeat for HEARTBEAT_LIVENESS s):
        its requests in flight, and its rows since its last report, are not in requests.csv."""
        listed = {lost["worker"] for lost in self.accounting.lost_workers}
        for client in self.runner.clients.missing:
            if client.id not in listed:
                last_seen = self.last_heartbeat.get(client.id)
                log.warning(
                    "Worker %s lost (last heartbeat at %s): its unreported rows are missing",
                    client.id,
                    time.strftime("%H:%M:%S", time.localtime(last_seen)) if last_seen else "never",
                )
                self.accounting.lose_worker(client.id, last_seen)
                self.run.update(self.accounting.run_keys())

    def _on_test_stop(self, **_kw: object) -> None:
        if self.run.folder:  # the last workers going missing stop the test in the same tick: name them too
            self._note_lost_workers()
        self._collect_last_rows()

    def _collect_last_rows(self) -> None:
        """Have every worker stop and send its last rows, and wait for them while it is alive (at most
        FLUSH_TIMEOUT_S): Locust's own quit gives the workers' final reports only 0.5 s, and a busy worker's come
        later and are dropped."""
        self.flushed.clear()
        self.runner.send_message(FLUSH_MESSAGE)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while (waiting := self._alive_workers() - self.flushed) and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if waiting:
            log.warning("No last rows from worker(s) %s within %.0f s", ", ".join(waiting), FLUSH_TIMEOUT_S)

    def _alive_workers(self) -> set[str]:
        return {client.id for client in self.runner.clients.values() if client.state != STATE_MISSING}
