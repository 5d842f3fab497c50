"""Rows from every worker into one run folder, the current level, live token throughput and per-level latencies.

Workers keep their rows and ITL counts since the last report and ship them as a delta with Locust's regular
worker report (``report_to_master``; the final report is sent when a worker quits). The master merges them
(``worker_report``) and appends them to ``requests.csv`` at once. A local (single-process) run writes directly.

The level (target user count) a request started in is stamped on its row. The master follows the runner's target
user count and tells the workers with a custom message whenever it changes; a load shape may set it directly.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict

import gevent
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from locustfiles import records
from locustfiles.exchange import Exchange
from locustfiles.runfolder import RunFolder, RunFolderExists, default_path, write_final_locust_csvs
from locustfiles.stream import clocks as receive_clocks

log = logging.getLogger(__name__)

LEVEL_MESSAGE = "vllm_stress_level"
LEVEL_REQUEST = "vllm_stress_level_request"
FLUSH_MESSAGE = "vllm_stress_flush"
FLUSH_TIMEOUT_S = 10.0  # how long a stopping master waits for the workers' last rows
REPORT_KEY = "vllm_stress"
WATCH_INTERVAL_S = 1.0
LOG_INTERVAL_S = 10.0
REPORT_LAG_S = 3.0  # worker reports arrive up to WORKER_REPORT_INTERVAL late
_COMPLETION = records.REQUEST_COLUMNS.index("completion_tokens")
_END = records.REQUEST_COLUMNS.index("end_time")
_OK = records.REQUEST_COLUMNS.index("ok")
_MISMATCH = records.REQUEST_COLUMNS.index("count_mismatch")
_USERS = records.REQUEST_COLUMNS.index("users")
_TTFT = records.REQUEST_COLUMNS.index("ttft_s")
_TPOT = records.REQUEST_COLUMNS.index("tpot_s")
_E2E = records.REQUEST_COLUMNS.index("e2e_s")


class LevelLatencies:
    """The requests that started at one level, for the live view (the analysis reads requests.csv instead).

    Latencies are kept as histograms ({bucket ms: count}), so the master's memory does not grow with the run.
    """

    __slots__ = ("requests", "failures", "ttft_ms", "tpot_ms", "e2e_ms")

    def __init__(self) -> None:
        self.requests = 0
        self.failures = 0
        self.ttft_ms: Counter = Counter()  # of successful requests only, like tpot_ms and e2e_ms
        self.tpot_ms: Counter = Counter()
        self.e2e_ms: Counter = Counter()

    def add(self, row: list) -> None:
        self.requests += 1
        if not row[_OK]:
            self.failures += 1
            return
        self.e2e_ms[records.latency_bucket_ms(row[_E2E])] += 1
        if row[_TTFT] != "":
            self.ttft_ms[records.latency_bucket_ms(row[_TTFT])] += 1
        if row[_TPOT] != "":
            self.tpot_ms[records.latency_bucket_ms(row[_TPOT])] += 1


class Recorder:
    def __init__(self, environment) -> None:
        self.environment = environment
        self.runner = environment.runner
        self.worker_id = self.runner.client_id if isinstance(self.runner, WorkerRunner) else "local"
        self.level = 0
        self.pending_rows: list[list] = []
        self.itl: dict[int, Counter] = defaultdict(Counter)
        self.folder: RunFolder | None = None
        self.meta: dict = {}
        self.open_level: tuple[int, float, float | None] | None = None
        self.totals = Counter()
        self.tokens_by_second: Counter = Counter()
        self.latencies_by_level: dict[int, LevelLatencies] = defaultdict(LevelLatencies)
        self.stopped = False
        self.quitting = False
        self.final = False  # a worker's report carries its last rows
        self.flushed: set[str] = set()  # workers whose last rows the master has
        self._runs = 0
        events = environment.events
        if isinstance(self.runner, WorkerRunner):
            events.report_to_master.add_listener(self._ship)
            events.quitting.add_listener(self._on_worker_quitting)
            self.runner.register_message(LEVEL_MESSAGE, self._on_level_message)
            self.runner.register_message(FLUSH_MESSAGE, self._flush)
            # ask for the current level now that the handler is there: Locust fires init only after the worker has
            # connected, so a message the master sent at once on connect would arrive before it (and be dropped).
            # Sent from a greenlet: a send that yields inside init lets the spawn message in before init is done.
            gevent.spawn(self.runner.send_message, LEVEL_REQUEST)
            return
        events.test_start.add_listener(self._open)
        events.test_stop.add_listener(self._on_test_stop)
        events.quitting.add_listener(self._on_quitting)
        events.quit.add_listener(self._on_quit)
        if isinstance(self.runner, MasterRunner):
            events.worker_report.add_listener(self._receive)
            self.runner.register_message(LEVEL_REQUEST, self._on_level_request)
            events.heartbeat_sent.add_listener(self._on_heartbeat)
        self.last_heartbeat: dict[str, float] = {}  # worker id -> when the master last heard from it
        gevent.spawn(self._watch)

    # --- every process -------------------------------------------------------------------------------------------

    def record(self, exchange: Exchange) -> None:
        """Account for one finished request (successful or not)."""
        histogram = self.itl[exchange.users]
        for gap in exchange.gaps:
            histogram[records.latency_bucket_ms(gap)] += 1
        row = exchange.row(self.worker_id)
        if isinstance(self.runner, WorkerRunner):
            self.pending_rows.append(row)
        else:
            self._write([row])

    # --- worker --------------------------------------------------------------------------------------------------

    def _ship(self, client_id, data, **_kw) -> None:
        data[REPORT_KEY] = {"rows": self.pending_rows, "itl": {u: dict(h) for u, h in self.itl.items()},
                            "final": self.final}
        self.pending_rows = []
        self.itl = defaultdict(Counter)

    def _on_level_message(self, environment, msg, **_kw) -> None:
        self.level = int(msg.data)

    def _on_worker_quitting(self, environment, **_kw) -> None:
        """This worker quits by itself (SIGTERM, Ctrl-C, master gone): send the last rows at once. Locust sends a final
        report only when the master asks a worker to quit."""
        self._flush()

    def _flush(self, *_args, **_kw) -> None:
        """Stop the users (the rows of requests in flight say Aborted) and send every row now, marked final."""
        self.runner.stop()
        self.final = True
        self.runner._send_stats()
        self.final = False

    # --- master / local ------------------------------------------------------------------------------------------

    def set_level(self, users: int) -> None:
        """Stamp ``users`` on the rows of requests that start from now on, in every process."""
        if users == self.level:
            return
        self.level = users
        if isinstance(self.runner, MasterRunner):
            self.runner.send_message(LEVEL_MESSAGE, users)

    def level_started(self, users: int) -> None:
        """A level's ramp begins (announcing the level that is already ramping again changes nothing)."""
        if self.open_level and self.open_level[0] == users and self.open_level[2] is None:
            return
        self._close_level(time.time())
        self.set_level(users)
        self.open_level = (users, time.time(), None)

    def level_held(self) -> None:
        """Every user of the open level is running: its steady-state window starts."""
        if self.open_level:
            users, ramp_start, _ = self.open_level
            self.open_level = (users, ramp_start, time.time())

    def level_ended(self) -> None:
        """The open level's hold is over."""
        self._close_level(time.time())

    def _close_level(self, now: float) -> None:
        if self.open_level and self.folder:
            users, ramp_start, hold_start = self.open_level
            self.folder.write_level(users, ramp_start, hold_start or now, now)
        self.open_level = None

    def _on_level_request(self, environment, msg, **_kw) -> None:
        if self.level:
            self.runner.send_message(LEVEL_MESSAGE, self.level, client_id=msg.node_id)

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
        self.meta = {key: None for key in records.RUN_KEYS} | {
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
        }
        self.folder.write_run(self.meta)
        self.set_level(self.runner.target_user_count)  # set just before test_start; the first users start after
        log.info("Writing the run to %s", path)

    def _receive(self, client_id, data, **_kw) -> None:
        delta = data.get(REPORT_KEY)
        if not delta:
            return
        if client_id not in self.meta.get("workers", [client_id]):
            self.meta["workers"].append(client_id)
        for users, histogram in delta["itl"].items():
            self.itl[int(users)].update(histogram)
        self._write(delta["rows"])
        if delta.get("final"):
            self.flushed.add(client_id)

    def _write(self, rows: list[list]) -> None:
        if not rows:
            return
        for row in rows:
            self.totals["requests"] += 1
            self.totals["failures"] += 1 - row[_OK]
            self.totals["mismatches"] += row[_MISMATCH]
            self.latencies_by_level[row[_USERS]].add(row)
            if row[_COMPLETION] != "":
                self.tokens_by_second[int(row[_END])] += row[_COMPLETION]
        if self.folder:
            self.folder.write_rows(rows)

    def _watch(self) -> None:
        """Follow the target user count; every LOG_INTERVAL_S log output tokens/s and save the ITL histogram."""
        last_log = time.time()
        while True:
            gevent.sleep(WATCH_INTERVAL_S)
            target = getattr(self.runner, "target_user_count", 0) or 0
            if target and self.open_level is None:
                self.set_level(target)
            if time.time() - last_log >= LOG_INTERVAL_S and self.folder and not self.stopped:
                last_log = time.time()
                self._log_progress()
                self.folder.write_itl(self.itl)
            if isinstance(self.runner, MasterRunner) and self.folder and not self.stopped:
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
                log.warning("Worker %s lost (last heartbeat at %s): its unreported rows are missing", client.id,
                            time.strftime("%H:%M:%S", time.localtime(last_seen)) if last_seen else "never")
                self.meta["lost_workers"].append({"worker": client.id, "last_seen": last_seen})
                self.folder.write_run(self.meta)

    def output_tokens_per_s(self, window_s: float = LOG_INTERVAL_S) -> float:
        """Output tokens/s over the last ``window_s`` seconds that every worker has reported."""
        end = int(time.time() - (REPORT_LAG_S if isinstance(self.runner, MasterRunner) else 0))
        return sum(self.tokens_by_second[s] for s in range(end - int(window_s), end)) / window_s

    def _log_progress(self) -> None:
        log.info("level %d users | output %.0f tok/s | %d requests, %d failed", self.level,
                 self.output_tokens_per_s(), self.totals["requests"], self.totals["failures"])

    def _on_test_stop(self, environment, **_kw) -> None:
        self.stopped = True
        if isinstance(self.runner, MasterRunner):
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
            log.warning("No last rows from worker(s) %s within %.0f s", ", ".join(workers - self.flushed),
                        FLUSH_TIMEOUT_S)

    def _on_quitting(self, environment, **_kw) -> None:
        # quitting before test_stop means the run was interrupted (SIGTERM, Ctrl-C): mark it partial. After a SIGTERM
        # Locust shuts down twice (its signal handler, then its main greenlet, after test_stop): the first one tells.
        if not self.quitting:
            self.quitting = True
            self.meta["complete"] = self.stopped

    def _on_quit(self, exit_code=0, **_kw) -> None:
        if prefix := self.environment.parsed_options.csv_prefix:
            write_final_locust_csvs(self.environment, prefix)
        if not self.folder:
            return
        now = time.time()
        self._close_level(now)
        self.folder.write_itl(self.itl)
        self.meta["ended"] = now
        self.folder.write_run(self.meta)
        self.folder.close()
        log.info("%s: %d requests, %d failed, %d with token counts off target", self.folder.path,
                 self.totals["requests"], self.totals["failures"], self.totals["mismatches"])
        self.folder = None
