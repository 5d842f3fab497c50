"""Rows from every worker into one run folder, the current level, live token throughput and per-level latencies.

Workers keep their rows and ITL counts since the last report and ship them as a delta with Locust's regular
worker report (``report_to_master``; the final report is sent when a worker quits). The master merges them
(``worker_report``) and appends them to ``requests.csv`` at once. A local (single-process) run writes directly.

The level (target user count) a request started in is stamped on its row. The master follows the runner's target
user count and tells the workers with a custom message whenever it changes; a load shape may set it directly, and
says with it whether a level's hold is on: the inter-token gaps go into ``itl_histogram.csv`` only for the measured
streams (``Exchange.measured``) that end during a hold, the population of the analysis' other latencies. A plain run
without a shape has no phases and keeps every measured stream's gaps.

The master (or local runner) also keeps the rows of the current level's time (those that ended since its ramp
began), so a load shape can judge live whether the level is steady (``vllm_stress.steady``). A row comes when its
request ends, so each worker report also carries what its requests still in flight have streamed so far: with it the
master knows every request's tokens up to the newest report of every worker.
"""

from __future__ import annotations

import logging
import time
from collections import Counter, defaultdict, deque

import gevent
import numpy as np
from locust.runners import STATE_MISSING, MasterRunner, WorkerRunner

from locustfiles.exchange import Exchange
from locustfiles.runfolder import RunFolder, RunFolderExists, default_path, write_final_locust_csvs
from locustfiles.stream import clocks as receive_clocks
from vllm_stress import schema, steady
from vllm_stress.metrics import percentile, streamed_tokens

log = logging.getLogger(__name__)

LEVEL_MESSAGE = "vllm_stress_level"
LEVEL_REQUEST = "vllm_stress_level_request"
FLUSH_MESSAGE = "vllm_stress_flush"
FLUSH_TIMEOUT_S = 10.0  # how long a stopping master waits for the workers' last rows
REPORT_KEY = "vllm_stress"
WATCH_INTERVAL_S = 1.0
LOG_INTERVAL_S = 10.0
REPORT_LAG_S = 3.0  # worker reports arrive up to WORKER_REPORT_INTERVAL late
# positions in a requests.csv row of the columns read here
_COMPLETION, _END, _OK, _MISMATCH, _USERS, _TTFT, _TPOT, _E2E, _START, _CHUNKS, _ERROR, _FINISH, _LAG = (
    schema.REQUEST_COLUMNS.index(column) for column in (
        "completion_tokens", "end_time", "ok", "count_mismatch", "users", "ttft_s", "tpot_s", "e2e_s", "start_time",
        "chunks", "error", "finish_reason", "schedule_lag_s"))
RECENT_ROWS = 20_000  # measured requests kept for the live latency charts
LEVEL_ROWS_LIMIT = 500_000  # rows kept for the live steady-state check (a level's, a few hundred bytes each)


def row_measured(row: list) -> bool:
    """Exchange.measured, read back from a requests.csv row."""
    return bool(row[_OK]) and not row[_MISMATCH] and row[_FINISH] != "abort"


def row_aborted(row: list) -> bool:
    return not row[_OK] and row[_ERROR] == schema.ABORTED


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
        if row_aborted(row):
            self.aborted += 1
            return
        self.requests += 1
        if not row[_OK]:
            self.failures += 1
            return
        if not row_measured(row):
            return
        self.e2e_ms[schema.latency_bucket_ms(row[_E2E])] += 1
        if row[_TTFT] != "":
            self.ttft_ms[schema.latency_bucket_ms(row[_TTFT])] += 1
        if row[_TPOT] != "":
            self.tpot_ms[schema.latency_bucket_ms(row[_TPOT])] += 1


class Recorder:
    def __init__(self, environment) -> None:
        self.environment = environment
        self.runner = environment.runner
        self.worker_id = self.runner.client_id if isinstance(self.runner, WorkerRunner) else "local"
        self.level = 0
        self.measuring = True  # a hold is on (or there are no phases): inter-token gaps are kept
        self.level_results: list[dict] = []  # per level held: users, steady, reason, output tok/s (live estimates)
        self.phase_text = ""  # what the load shape is doing, for the web UI (the shape logs each change) ...
        self.phase_since = 0.0  # ... since when (unix seconds)
        self.phase_limit_s: float | None = None  # ... and for how long at most
        self.level_rows: list[list] = []  # master/local: the rows that ended since the current level's ramp began
        self.in_flight: set[Exchange] = set()  # this process's requests being sent or read
        self.in_flight_reports: dict[str, tuple[float, list]] = {}  # master: worker -> (report time, its in_flight)
        self.pending_rows: list[list] = []
        self.itl: dict[int, Counter] = defaultdict(Counter)
        self.folder: RunFolder | None = None
        self.last_folder: str | None = None  # the path of the run folder written last
        self.meta: dict = {}
        self.open_level: tuple[int, float, float | None] | None = None
        self.totals = Counter()
        self.tokens_by_second: Counter = Counter()
        self.latencies_by_level: dict[int, LevelLatencies] = defaultdict(LevelLatencies)
        self.recent: deque = deque(maxlen=RECENT_ROWS)  # (end, ttft, tpot) of the latest measured requests
        self.stopped = False
        self.quitting = False
        self.final = False  # a worker's report carries its last rows
        self.flushed: set[str] = set()  # workers whose last rows the master has
        self.rows_by_worker: Counter = Counter()  # rows the master received from each worker
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

    def started(self, exchange: Exchange) -> None:
        """A request is being sent: it is in flight until ``record``."""
        self.in_flight.add(exchange)

    def in_flight_now(self) -> list[list]:
        """[start, first token or start, chunks received] (unix seconds) of this process's requests in flight."""
        return [exchange.progress() for exchange in self.in_flight]

    def record(self, exchange: Exchange) -> None:
        """Account for one finished request (successful or not)."""
        self.in_flight.discard(exchange)
        if self.measuring and exchange.measured:
            histogram = self.itl[exchange.users]
            for gap in exchange.gaps:
                histogram[schema.latency_bucket_ms(gap)] += 1
        row = exchange.row(self.worker_id)
        if isinstance(self.runner, WorkerRunner):
            self.pending_rows.append(row)
        else:
            self._write([row])

    # --- worker --------------------------------------------------------------------------------------------------

    def _ship(self, client_id, data, **_kw) -> None:
        data[REPORT_KEY] = {"rows": self.pending_rows, "itl": {u: dict(h) for u, h in self.itl.items()},
                            "final": self.final, "time": time.time(), "in_flight": self.in_flight_now()}
        self.pending_rows = []
        self.itl = defaultdict(Counter)

    def _on_level_message(self, environment, msg, **_kw) -> None:
        users, measuring = msg.data
        self.level, self.measuring = int(users), bool(measuring)

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

    def set_level(self, users: int, measuring: bool | None = None) -> None:
        """Stamp ``users`` on the rows of requests that start from now on, and say whether a hold is on
        (``measuring``; unchanged when None), in every process."""
        measuring = self.measuring if measuring is None else measuring
        if (users, measuring) == (self.level, self.measuring):
            return
        self.level, self.measuring = users, measuring
        if isinstance(self.runner, MasterRunner):
            self.runner.send_message(LEVEL_MESSAGE, [users, measuring])

    def level_started(self, users: int) -> None:
        """A level's ramp begins (announcing the level that is already ramping again changes nothing)."""
        if self.open_level and self.open_level[0] == users and self.open_level[2] is None:
            return
        now = time.time()
        self._close_level(now)
        self.set_level(users, measuring=False)
        self.open_level = (users, now, None)
        self.level_rows = [row for row in self.level_rows if row[_END] >= now]

    def level_held(self) -> None:
        """Every user of the open level is running and warmed up: its steady-state window starts."""
        if self.open_level:
            users, ramp_start, _ = self.open_level
            self.open_level = (users, ramp_start, time.time())
            self.set_level(users, measuring=True)

    def level_ended(self, verdict: steady.Verdict | None = None) -> None:
        """The open level's hold is over; with the load shape's ``verdict`` its point joins ``level_results`` (the
        live throughput-vs-users curve) with its schedule lag (for its bound: locustfiles/bound.py)."""
        if verdict is not None and self.open_level:
            self.level_results.append({"users": self.open_level[0], "steady": verdict.steady, "reason": verdict.reason,
                                       "output_tokens_per_s": self.hold_output_tokens_per_s(),
                                       "schedule_lag_p99_s": self.hold_schedule_lag_p99_s()})
        self._close_level(time.time())
        self.set_level(self.level, measuring=False)

    def level_completions(self) -> int:
        """Requests of the current level that ended since its ramp began (aborted ones apart)."""
        return sum(1 for row in self.level_rows if row[_USERS] == self.level and not row_aborted(row))

    def hold_verdict(self) -> steady.Verdict:
        """The steady-state verdict on the open level's hold so far (``hold_sample``)."""
        hold = self.hold_sample()
        if hold is None:
            return steady.Verdict(False, "the level is not held", np.nan, np.nan)
        return steady.judge(*hold)

    def hold_output_tokens_per_s(self) -> float:
        """Output tokens/s streamed during the open level's hold so far (vllm_stress.metrics.streamed_tokens)."""
        hold = self.hold_sample()
        if hold is None or hold[1] <= hold[0]:
            return np.nan
        start, end, sample = hold
        return streamed_tokens(sample.first, sample.end, sample.tokens, start, end) / (end - start)

    def hold_schedule_lag_p99_s(self) -> float:
        """The p99 schedule lag of the open level's measured requests that ended in its hold so far (NaN in a closed
        loop), as the report's schedule_lag_p99_s (vllm_stress.metrics.percentile)."""
        hold_start = self.open_level[2] if self.open_level else None
        lags = [row[_LAG] for row in self.level_rows if hold_start is not None and row[_END] >= hold_start
                and row[_USERS] == self.level and row_measured(row) and row[_LAG] != ""]
        return percentile(np.array(lags, dtype=float), 99)

    def hold_sample(self) -> tuple[float, float, steady.Requests] | None:
        """The open level's hold so far — its start, the time up to which every worker has reported (now in a local
        run), and the requests: the rows of those that ended and what those still in flight streamed so far — or
        None when no level is held."""
        hold_start = self.open_level[2] if self.open_level else None
        if hold_start is None:
            return None
        end, partial = self.in_flight_snapshot()
        rows = self.level_rows
        starts, ends, e2e = (np.array([row[index] for row in rows], dtype=float) for index in (_START, _END, _E2E))
        ttft = np.array([np.nan if row[_TTFT] == "" else row[_TTFT] for row in rows], dtype=float)
        tokens = np.array([row[_CHUNKS] if row[_COMPLETION] == "" else row[_COMPLETION] for row in rows], dtype=float)
        measured = np.array([row[_USERS] == self.level and row_measured(row) for row in rows], dtype=bool)
        running = np.array(partial, dtype=float).reshape(-1, 4)  # start, first, chunks, snapshot time
        return hold_start, end, steady.Requests(
            start=np.concatenate([starts, running[:, 0]]), end=np.concatenate([ends, running[:, 3]]),
            first=np.concatenate([starts + np.nan_to_num(ttft), running[:, 1]]),
            tokens=np.concatenate([tokens, running[:, 2]]),
            measured=np.concatenate([measured, np.zeros(len(running), dtype=bool)]),
            e2e=np.concatenate([e2e, running[:, 3] - running[:, 0]]),
            ttft=np.concatenate([ttft, np.full(len(running), np.nan)]))

    def in_flight_snapshot(self) -> tuple[float, list[list]]:
        """The time up to which every request is known, and [start, first, chunks, snapshot time] of those that were
        still in flight then (per worker as of its newest report)."""
        if not isinstance(self.runner, MasterRunner):
            now = time.time()
            return now, [[*progress, now] for progress in self.in_flight_now()]
        live = {client.id for client in self.runner.clients.values() if client.state != STATE_MISSING}
        reports = {worker: report for worker, report in self.in_flight_reports.items() if worker in live}
        if not reports:
            return time.time() - self.report_lag_s, []
        end = min(report_time for report_time, _ in reports.values())
        return end, [[*progress, report_time] for report_time, entries in reports.values() for progress in entries]

    def _close_level(self, now: float) -> None:
        if self.open_level and self.folder:
            users, ramp_start, hold_start = self.open_level
            self.folder.write_level(users, ramp_start, hold_start or now, now)
        self.open_level = None

    def _on_level_request(self, environment, msg, **_kw) -> None:
        if self.level:
            self.runner.send_message(LEVEL_MESSAGE, [self.level, self.measuring], client_id=msg.node_id)

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
        self.level_results.clear()
        self.rows_by_worker.clear()
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
        self.in_flight_reports[client_id] = (delta["time"], delta["in_flight"])
        self.rows_by_worker[client_id] += len(delta["rows"])
        if delta.get("final"):
            self.flushed.add(client_id)

    def _write(self, rows: list[list]) -> None:
        if not rows:
            return
        for row in rows:
            aborted = row_aborted(row)
            self.totals["aborted"] += aborted
            self.totals["requests"] += not aborted
            self.totals["failures"] += not (aborted or row[_OK])
            self.totals["mismatches"] += row[_MISMATCH]
            self.latencies_by_level[row[_USERS]].add(row)
            if row_measured(row):
                self.recent.append((row[_END], row[_TTFT], row[_TPOT]))
            if row[_COMPLETION] != "":
                self.tokens_by_second[int(row[_END])] += row[_COMPLETION]
        if self.open_level and len(self.level_rows) < LEVEL_ROWS_LIMIT:
            self.level_rows += rows
        if self.folder:
            self.folder.write_rows(rows)

    def _watch(self) -> None:
        """Follow the target user count; every LOG_INTERVAL_S save the ITL histogram and, without a load shape, log
        output tokens/s."""
        last_log = time.time()
        while True:
            gevent.sleep(WATCH_INTERVAL_S)
            target = getattr(self.runner, "target_user_count", 0) or 0
            if target and self.open_level is None:
                self.set_level(target)
            if time.time() - last_log >= LOG_INTERVAL_S and self.folder and not self.stopped:
                last_log = time.time()
                if not self.phase_text:  # a load shape logs its phases instead: one line per phase change
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
                self.meta["lost_workers"].append({"worker": client.id, "last_seen": last_seen,
                                                  "rows": self.rows_by_worker[client.id]})
                self.folder.write_run(self.meta)

    @property
    def report_lag_s(self) -> float:
        """How late rows reach this process: a worker's come with its reports."""
        return REPORT_LAG_S if isinstance(self.runner, MasterRunner) else 0.0

    def account_unreported(self, server_requests: int | None) -> None:
        """Keep in run.json how many requests the server finished in this run and how many of them have no row
        (``unaccounted_requests``: the lost workers' requests in flight and unreported rows). Counted from the
        server's own counter, so it assumes the run is the server's only client; requests that never reached the
        server (refused connections) make it a lower bound."""
        if server_requests is None or not self.folder:
            return
        self.meta["server_requests"] = server_requests
        rows = self.totals["requests"] + self.totals["aborted"]  # the server counts aborted streams as finished too
        self.meta["unaccounted_requests"] = max(0, server_requests - rows)
        self.folder.write_run(self.meta)

    def _unaccounted_note(self) -> str:
        """'; N more served by the server and lost with worker(s) ...' for the console's last line, or ''."""
        unaccounted = self.meta.get("unaccounted_requests")
        if not unaccounted:
            return ""
        if lost := ", ".join(lost["worker"] for lost in self.meta["lost_workers"]):
            return f"; {unaccounted} more served by the server and lost with worker(s) {lost}"
        return f"; {unaccounted} more served by the server (no worker lost: another client of the server?)"

    def output_tokens_per_s(self, window_s: float = LOG_INTERVAL_S) -> float:
        """Output tokens/s over the last ``window_s`` seconds that every worker has reported."""
        end = int(time.time() - self.report_lag_s)
        return sum(self.tokens_by_second[s] for s in range(end - int(window_s), end)) / window_s

    def _log_progress(self) -> None:
        log.info("level %d users | output %.0f tok/s | %d requests, %d failed, %d aborted", self.level,
                 self.output_tokens_per_s(), self.totals["requests"], self.totals["failures"], self.totals["aborted"])

    def _on_test_stop(self, environment, **_kw) -> None:
        self.stopped = True
        if isinstance(self.runner, MasterRunner):
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
        log.info("%s: %d requests, %d failed, %d with token counts off target; %d streams aborted when the run "
                 "stopped (not failures)%s", self.folder.path, self.totals["requests"], self.totals["failures"],
                 self.totals["mismatches"], self.totals["aborted"], self._unaccounted_note())
        self.folder = None
