"""The run as the master or the local runner records it: the run folder (``requests.csv``, ``levels.csv``,
``itl_histogram.csv``, ``run.json``), the level stamped on new requests, what the web UI shows live, and the
accounting of every request started (rows, aborted streams, lost workers).

The load shape's events (``vllm_stress/master/hooks.py``) open and close the levels' windows in ``levels.csv``; every batch
of rows written is announced with ``hooks.rows_received`` (the shape's ``LevelWindow`` judges the hold from them).
``LocalRecorder`` is a single-process run; ``MasterRecorder`` adds the workers: their reports, their last rows when
the run stops, and the workers Locust marked missing.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict, deque

import gevent
from locust.runners import STATE_MISSING

from vllm_stress.client import serverinfo
from vllm_stress.client.recorder import FLUSH_MESSAGE, LEVEL_MESSAGE, LEVEL_REQUEST, REPORT_KEY, ROWS_MESSAGE, Recorder
from vllm_stress.client.stream import clocks as receive_clocks
from vllm_stress.core import schema
from vllm_stress.master import hooks, rows
from vllm_stress.master.runfolder import RunFolder, RunFolderExists, default_path, write_final_locust_csvs

log = logging.getLogger(__name__)

FLUSH_TIMEOUT_S = 10.0  # how long a stopping master waits for the workers' last rows
WATCH_INTERVAL_S = 1.0
LOG_INTERVAL_S = 10.0
REPORT_LAG_S = 3.0  # worker reports arrive up to WORKER_REPORT_INTERVAL late
RECENT_ROWS = 20_000  # measured requests kept for the live latency charts


class LevelLatencies:
    """The requests that started at one level, for the live view (the analysis reads requests.csv instead).

    Latencies are kept as histograms ({bucket ms: count}), so the master's memory does not grow with the run.
    """

    __slots__ = ("requests", "failures", "aborted", "ttft_ms", "tpot_ms", "e2e_ms")

    def __init__(self) -> None:
        self.requests = 0  # successes and failures; aborted streams apart
        self.failures = 0
        self.aborted = 0
        self.ttft_ms: Counter = Counter()  # of measured requests only, like tpot_ms and e2e_ms
        self.tpot_ms: Counter = Counter()
        self.e2e_ms: Counter = Counter()

    def add(self, row: list) -> None:
        if rows.aborted(row):
            self.aborted += 1
            return
        self.requests += 1
        if not row[rows.OK]:
            self.failures += 1
            return
        if not rows.measured(row):
            return
        self.e2e_ms[schema.latency_bucket_ms(row[rows.E2E])] += 1
        if row[rows.TTFT] != "":
            self.ttft_ms[schema.latency_bucket_ms(row[rows.TTFT])] += 1
        if row[rows.TPOT] != "":
            self.tpot_ms[schema.latency_bucket_ms(row[rows.TPOT])] += 1


class LocalRecorder(Recorder):
    """A single-process run: its own rows straight into the run folder."""

    report_lag_s = 0.0  # how late rows reach this process

    def __init__(self, environment) -> None:
        super().__init__(environment, "local")
        self.folder: RunFolder | None = None
        self.last_folder: str | None = None  # the path of the run folder written last
        self.meta: dict = {}
        self.open_level: tuple[int, float, float | None] | None = None  # users, ramp start, hold start
        self.totals = Counter()
        self.tokens_by_second: Counter = Counter()
        self.latencies_by_level: dict[int, LevelLatencies] = defaultdict(LevelLatencies)
        self.recent: deque = deque(maxlen=RECENT_ROWS)  # (end, ttft, tpot) of the latest measured requests
        self.stopped = False
        self.quitting = False
        self._runs = 0
        events = environment.events
        events.test_start.add_listener(self._open)
        events.test_stop.add_listener(self._on_test_stop)
        events.quitting.add_listener(self._on_quitting)
        events.quit.add_listener(self._on_quit)
        hooks.level_started.add_listener(self._on_level_started)
        hooks.level_held.add_listener(self._on_level_held)
        hooks.level_ended.add_listener(self._on_level_ended)
        gevent.spawn(self._watch)

    def keep(self, rows: list[list]) -> None:
        self._write(rows)

    # --- levels ---------------------------------------------------------------------------------------------------

    def set_level(self, users: int, measuring: bool | None = None) -> None:
        """Stamp ``users`` on the rows of requests that start from now on, and say whether a hold is on
        (``measuring``; unchanged when None)."""
        self.level, self.measuring = users, self.measuring if measuring is None else measuring

    def _on_level_started(self, environment, users: int, **_kw) -> None:
        """A level's ramp begins (announcing the level that is already ramping again changes nothing)."""
        if environment is not self.environment or (
            self.open_level and self.open_level[0] == users and self.open_level[2] is None
        ):
            return
        now = time.time()
        self._close_level(now)
        self.set_level(users, measuring=False)
        self.open_level = (users, now, None)

    def _on_level_held(self, environment, **_kw) -> None:
        if environment is self.environment and self.open_level:
            users, ramp_start, _ = self.open_level
            self.open_level = (users, ramp_start, time.time())
            self.set_level(users, measuring=True)

    def _on_level_ended(self, environment, **_kw) -> None:
        if environment is self.environment:
            self._close_level(time.time())
            self.set_level(self.level, measuring=False)

    def _close_level(self, now: float) -> None:
        if self.open_level and self.folder:
            users, ramp_start, hold_start = self.open_level
            self.folder.write_level(users, ramp_start, hold_start or now, now)
        self.open_level = None

    # --- the run folder -------------------------------------------------------------------------------------------

    def _open(self, environment, **_kw) -> None:
        options = environment.parsed_options
        self._runs += 1
        path = options.results_dir or default_path()
        if self._runs > 1:
            path = f"{path}-{self._runs}"
        try:
            self.folder = RunFolder(path, overwrite=options.overwrite)
        except (RunFolderExists, OSError) as e:
            log.error("%s", e)
            environment.process_exit_code = 2
            gevent.spawn(self.runner.quit)
            return
        self.stopped = False
        self.totals.clear()
        self.latencies_by_level.clear()
        self.meta = {key: None for key in schema.RUN_KEYS} | {
            "scenario": getattr(options, "scenario", "") or "",
            "target": environment.host,
            "model": options.model or environment.llm_target.model,
            "user_class": ",".join(cls.__name__ for cls in environment.user_classes),
            "input_tokens": options.input_tokens,
            "output_tokens": options.output_tokens,
            "started": time.time(),
            "complete": False,
            "workers": [],
            "lost_workers": [],
            "receive_clock": receive_clocks,  # filled as users start (workers: with their reports)
            "server_version": serverinfo.server_version(
                environment.host, environment.llm_target.headers, verify=not options.insecure
            ),
            "server_launch": serverinfo.server_launch(options),
        }
        self.folder.write_run(self.meta)
        self.set_level(self.runner.target_user_count)  # set just before test_start; the first users start after
        log.info("Writing the run to %s", path)

    def _write(self, new_rows: list[list]) -> None:
        if not new_rows:
            return
        for row in new_rows:
            aborted = rows.aborted(row)
            self.totals["aborted"] += aborted
            self.totals["requests"] += not aborted
            self.totals["failures"] += not (aborted or row[rows.OK])
            self.totals["mismatches"] += row[rows.MISMATCH]
            self.latencies_by_level[row[rows.USERS]].add(row)
            if rows.measured(row):
                self.recent.append((row[rows.END], row[rows.TTFT], row[rows.TPOT]))
            if row[rows.COMPLETION] != "":
                self.tokens_by_second[int(row[rows.END])] += row[rows.COMPLETION]
        hooks.rows_received.fire(environment=self.environment, rows=new_rows)
        if self.folder:
            self.folder.write_rows(new_rows)

    def _watch(self) -> None:
        """Every second: follow the target user count (a run without a shape), report what the requests in flight
        streamed so far; every LOG_INTERVAL_S save the ITL histogram and, without a load shape, log output tokens/s."""
        last_log = time.time()
        while True:
            gevent.sleep(WATCH_INTERVAL_S)
            target = getattr(self.runner, "target_user_count", 0) or 0
            if target and self.open_level is None:
                self.set_level(target)
            self._each_second()
            if time.time() - last_log >= LOG_INTERVAL_S and self.folder and not self.stopped:
                last_log = time.time()
                if self.environment.shape_class is None:  # a load shape logs its phases instead, one line each
                    self._log_progress()
                self.folder.write_itl(self.itl)

    def _each_second(self) -> None:
        """What this process's requests in flight streamed so far, for the load shape's live verdict."""
        hooks.in_flight_reported.fire(
            environment=self.environment, source=self.worker_id, report_time=time.time(), entries=self.in_flight_now()
        )

    def output_tokens_per_s(self, window_s: float = LOG_INTERVAL_S) -> float:
        """Output tokens/s over the last ``window_s`` seconds that every process has reported."""
        end = int(time.time() - self.report_lag_s)
        return sum(self.tokens_by_second[s] for s in range(end - int(window_s), end)) / window_s

    def _log_progress(self) -> None:
        log.info(
            "level %d users | output %.0f tok/s | %d requests, %d failed, %d aborted",
            self.level,
            self.output_tokens_per_s(),
            self.totals["requests"],
            self.totals["failures"],
            self.totals["aborted"],
        )

    def account_unreported(self, server_requests: int | None) -> None:
        """Keep in run.json how many requests the server finished in this run and how many of them have no row
        (``unaccounted_requests``: the lost workers' requests in flight and unreported rows). Counted from the
        server's own counter, so it assumes the run is the server's only client; requests that never reached the
        server (refused connections) make it a lower bound."""
        if server_requests is None or not self.folder:
            return
        self.meta["server_requests"] = server_requests
        rows_kept = self.totals["requests"] + self.totals["aborted"]  # the server counts aborted streams as finished
        self.meta["unaccounted_requests"] = max(0, server_requests - rows_kept)
        self.folder.write_run(self.meta)

    def _unaccounted_note(self) -> str:
        """'; N more served by the server and lost with worker(s) ...' for the console's last line, or ''."""
        unaccounted = self.meta.get("unaccounted_requests")
        if not unaccounted:
            return ""
        if lost := ", ".join(lost["worker"] for lost in self.meta["lost_workers"]):
            return f"; {unaccounted} more served by the server and lost with worker(s) {lost}"
        return f"; {unaccounted} more served by the server (no worker lost: another client of the server?)"

    def _on_test_stop(self, environment, **_kw) -> None:
        self.stopped = True

    def _on_quitting(self, environment, **_kw) -> None:
        # quitting before test_stop means the run was interrupted (SIGTERM, Ctrl-C): mark it partial. After a SIGTERM
        # Locust shuts down twice (its signal handler, then its main greenlet, after test_stop): the first one tells.
        if not self.quitting:
            self.quitting = True
            self.meta["complete"] = self.stopped

    def _on_quit(self, exit_code=0, **_kw) -> None:
        if prefix := self.environment.parsed_options.csv_prefix:
            write_final_locust_csvs(self.environment, prefix)
        self.close_run()

    def close_run(self, complete: bool | None = None) -> None:
        """Write the run's last files and close its folder (at quit; a web-UI run's at its end, ``complete``, as the
        process goes on). Nothing when no folder is open."""
        if not self.folder:
            return
        if complete is not None:
            self.meta["complete"] = complete
        now = time.time()
        self._close_level(now)
        self.folder.write_itl(self.itl)
        self.itl.clear()  # a web-UI process's next run starts its own histogram
        self.meta["ended"] = now
        self.folder.write_run(self.meta)
        self.folder.close()
        self.last_folder = self.folder.path
        log.info(
            "%s: %d requests, %d failed, %d with token counts off target; %d streams aborted when the run "
            "stopped (not failures)%s",
            self.folder.path,
            self.totals["requests"],
            self.totals["failures"],
            self.totals["mismatches"],
            self.totals["aborted"],
            self._unaccounted_note(),
        )
        self.folder = None


class MasterRecorder(LocalRecorder):
    """The master: the workers' rows from their reports, the level told to them, their last rows at the end, and the
    workers Locust marks missing."""

    report_lag_s = REPORT_LAG_S

    def __init__(self, environment) -> None:
        super().__init__(environment)
        self.worker_id = "master"
        self.flushed: set[str] = set()  # workers whose last rows the master has
        self.rows_by_worker: Counter = Counter()  # rows the master received from each worker
        self.last_heartbeat: dict[str, float] = {}  # worker id -> when the master last heard from it
        environment.events.worker_report.add_listener(self._receive)
        environment.events.heartbeat_sent.add_listener(self._on_heartbeat)
        self.runner.register_message(LEVEL_REQUEST, self._on_level_request)
        self.runner.register_message(ROWS_MESSAGE, self._on_rows_message)

    def set_level(self, users: int, measuring: bool | None = None) -> None:
        """... in every process: the workers are told."""
        before = (self.level, self.measuring)
        super().set_level(users, measuring)
        if (self.level, self.measuring) != before:
            self.runner.send_message(LEVEL_MESSAGE, [self.level, self.measuring])

    def _on_level_request(self, environment, msg, **_kw) -> None:
        if self.level:
            self.runner.send_message(LEVEL_MESSAGE, [self.level, self.measuring], client_id=msg.node_id)

    def _open(self, environment, **_kw) -> None:
        self.rows_by_worker.clear()
        super()._open(environment)

    def _on_rows_message(self, environment, msg, **_kw) -> None:
        self._receive(msg.node_id, {REPORT_KEY: msg.data})

    def _receive(self, client_id, data, **_kw) -> None:
        delta = data.get(REPORT_KEY)
        if not delta:
            return
        if client_id not in self.meta.get("workers", [client_id]):
            self.meta["workers"].append(client_id)
        for users, histogram in delta["itl"].items():
            self.itl[int(users)].update(histogram)
        self._write(delta["rows"])
        hooks.in_flight_reported.fire(
            environment=self.environment, source=client_id, report_time=delta["time"], entries=delta["in_flight"]
        )
        self.rows_by_worker[client_id] += len(delta["rows"])
        if delta.get("final"):
            self.flushed.add(client_id)

    def _each_second(self) -> None:
        """The master runs no users; it names the workers Locust marked missing instead."""
        if self.folder and not self.stopped:
            self._note_lost_workers()

    def _on_heartbeat(self, client_id, timestamp, **_kw) -> None:
        self.last_heartbeat[client_id] = timestamp

    def _note_lost_workers(self) -> None:
        """Name in run.json each worker that Locust marked missing mid-run (no heartbeat for HEARTBEAT_LIVENESS s):
        its requests in flight, and its rows since its last report, are not in requests.csv."""
        listed = {lost["worker"] for lost in self.meta["lost_workers"]}
        for client in self.runner.clients.missing:
            if client.id not in listed:
                last_seen = self.last_heartbeat.get(client.id)
                log.warning(
                    "Worker %s lost (last heartbeat at %s): its unreported rows are missing",
                    client.id,
                    time.strftime("%H:%M:%S", time.localtime(last_seen)) if last_seen else "never",
                )
                self.meta["lost_workers"].append(
                    {"worker": client.id, "last_seen": last_seen, "rows": self.rows_by_worker[client.id]}
                )
                self.folder.write_run(self.meta)

    def _on_test_stop(self, environment, **_kw) -> None:
        super()._on_test_stop(environment)
        if self.folder:  # the last workers going missing stop the test in the same tick: name them too
            self._note_lost_workers()
        self._collect_last_rows()

    def _collect_last_rows(self) -> None:
        """Have every worker stop and send its last rows, and wait for them (at most FLUSH_TIMEOUT_S): Locust's own
        quit gives the workers' final reports only 0.5 s, and a busy worker's come later and are dropped."""
        workers = {client.id for client in self.runner.clients.values() if client.state != STATE_MISSING}
        self.flushed.clear()
        self.runner.send_message(FLUSH_MESSAGE)
        deadline = time.monotonic() + FLUSH_TIMEOUT_S
        while workers - self.flushed and time.monotonic() < deadline:
            gevent.sleep(0.05)
        if workers - self.flushed:
            log.warning(
                "No last rows from worker(s) %s within %.0f s", ", ".join(workers - self.flushed), FLUSH_TIMEOUT_S
            )
