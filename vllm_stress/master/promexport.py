"""The load generator's own Prometheus series, named and bucketed once (docs/guides/prometheus-grafana.md).

The master (or the local runner) feeds them from the rows it writes to ``requests.csv``, so every worker's requests
are merged and the series match the run folder; the live figures (level, phase, users, in flight, the load
generators' health, lost workers) are read at each scrape. One run's series at a time: they restart at test start.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gevent.pywsgi import WSGIServer
from prometheus_client import CollectorRegistry, generate_latest, make_wsgi_app
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from vllm_stress.client.classes import stats_name
from vllm_stress.core.histogram import Histogram
from vllm_stress.master import hooks, rows

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.core.steady import Verdict
    from vllm_stress.master.clienthealth import ClientHealth
    from vllm_stress.master.runrecorder import LocalRecorder

PREFIX = "vllm_stress_"
# milliseconds to minutes, about 1.5x apart: 1, 1.5, 2, 3, 5, 7.5 per decade
LATENCY_BUCKETS_S = tuple(round(m * 10.0**e, 6) for e in range(-3, 3) for m in (1, 1.5, 2, 3, 5, 7.5))
TOKEN_GAP_BUCKETS_S = tuple(round(m * 10.0**e, 6) for e in range(-4, 1) for m in (1, 1.5, 2, 3, 5, 7.5)) + (10.0,)
ROW_HISTOGRAMS = {  # name -> (row column, buckets, help): observed for measured requests (core/metrics.md)
    "time_to_first_token_seconds": (rows.TTFT, LATENCY_BUCKETS_S, "Client time to first token"),
    "time_per_output_token_seconds": (rows.TPOT, TOKEN_GAP_BUCKETS_S, "Client time per output token after the first"),
    "e2e_request_latency_seconds": (rows.E2E, LATENCY_BUCKETS_S, "Client end-to-end request latency"),
    "schedule_lag_seconds": (
        rows.SCHEDULE_LAG,
        LATENCY_BUCKETS_S,
        "Open loop: how late a request was sent after its arrival",
    ),
}
ITL_HISTOGRAM = "inter_token_latency_seconds"  # from the run's ITL counts: measured streams that ended in a hold
TOKEN_COUNTERS = {"prompt_tokens_total": rows.PROMPT, "generation_tokens_total": rows.COMPLETION}
MAX_ERROR_CLASSES = 20  # failure classes kept as label values; the rest are "other"
RUN_LABELS = ["scenario", "run"]
ROW_LABELS = [*RUN_LABELS, "user_class"]


class RunSeries:
    """One run's counts from its rows, by user class (the row's request name; the correctness canaries' apart as
    Locust names them, unless ``canaries_counted``): latencies, outcomes, tokens."""

    def __init__(self, canaries_counted: bool = False) -> None:
        self.canaries_counted = canaries_counted
        self.histograms: dict[tuple[str, str], Histogram] = {}  # (name, user class)
        self.requests: Counter[tuple[str, str, str]] = Counter()  # (user class, outcome, error class)
        self.tokens: Counter[tuple[str, str]] = Counter()  # (counter name, user class)
        self.errors: set[str] = set()
        self.steady: dict[int, bool] = {}  # level (users) -> its hold's verdict
        self.phase = ""

    def add(self, row: list[Any]) -> None:
        user_class = str(row[rows.NAME])
        if not rows.in_figures(row, self.canaries_counted) and row[rows.CANARY]:  # a primer keeps its own name
            user_class = stats_name(user_class, "", canary=True)
        outcome, error = self.outcome(row)
        self.requests[user_class, outcome, error] += 1
        for name, column in TOKEN_COUNTERS.items():
            if row[column] != "":
                self.tokens[name, user_class] += int(row[column])
        if outcome != "success":
            return
        for name, (column, bounds, _) in ROW_HISTOGRAMS.items():
            if row[column] != "":
                histogram = self.histograms.get((name, user_class))
                if histogram is None:  # made once: setdefault would build one per row (most of the master's CPU)
                    histogram = self.histograms[name, user_class] = Histogram(bounds)
                histogram.observe(float(row[column]))

    def outcome(self, row: list[Any]) -> tuple[str, str]:
        """(outcome, error class) as the analysis classifies rows: aborted, cancelled, failure, off_target or
        success."""
        if rows.aborted(row):
            return "aborted", ""
        if rows.cancelled(row):
            return "cancelled", ""
        if not row[rows.OK]:
            if row[rows.ERROR] not in self.errors and len(self.errors) >= MAX_ERROR_CLASSES:
                return "failure", "other"
            self.errors.add(row[rows.ERROR])
            return "failure", str(row[rows.ERROR])
        return ("success" if rows.measured(row) else "off_target"), ""


class PromExport(Collector):
    """The series of the master's (or local runner's) runs in a registry of their own (``registry``), served by
    Locust's web UI at ``/metrics`` and by ``serve`` on ``--metrics-port``."""

    def __init__(self, environment: Environment, recorder: LocalRecorder, health: ClientHealth) -> None:
        self.environment = environment
        self.recorder = recorder
        self.health = health
        self.series = RunSeries(rows.canaries_counted(environment))
        self.itl = Histogram(TOKEN_GAP_BUCKETS_S)  # the run's ITL counts as last read while its folder was open
        self.in_flight: dict[str, int] = {}  # process -> its requests in flight at its last report
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self)
        environment.events.test_start.add_listener(self._on_test_start)
        hooks.rows_received.add_listener(self._on_rows)
        hooks.in_flight_reported.add_listener(self._on_in_flight)
        hooks.phase_changed.add_listener(self._on_phase)
        hooks.level_ended.add_listener(self._on_level_ended)

    def exposition(self) -> bytes:
        """The text exposition of every series now."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[Metric]:
        labels = self.run_labels()
        yield from self.row_families(labels)
        yield from self.live_families(labels)

    def run_labels(self) -> list[str]:
        """The values of RUN_LABELS: the scenario ("" for a plain run) and the run folder's name."""
        run = self.recorder.run
        path = run.folder.path if run.folder else run.last_folder
        return [str(run.meta.get("scenario") or ""), Path(path).name if path else ""]

    def row_families(self, labels: list[str]) -> Iterator[Metric]:
        """The series fed by the rows: latency histograms, requests by outcome, tokens."""
        series = self.series
        for name, (_, _, text) in ROW_HISTOGRAMS.items():
            family = HistogramMetricFamily(PREFIX + name, text + " (measured requests)", labels=ROW_LABELS)
            for (histogram_name, user_class), histogram in sorted(series.histograms.items()):
                if histogram_name == name:
                    family.add_metric([*labels, user_class], histogram.buckets(floatToGoString), histogram.sum)
            yield family
        itl = HistogramMetricFamily(
            PREFIX + ITL_HISTOGRAM,
            "Client inter-chunk latency of measured streams that ended in a hold",
            labels=RUN_LABELS,
        )
        histogram = self.itl_histogram()
        itl.add_metric(labels, histogram.buckets(floatToGoString), histogram.sum)
        yield itl
        requests = CounterMetricFamily(
            PREFIX + "requests",
            "Requests ended, by outcome and failure class",
            labels=[*ROW_LABELS, "outcome", "error"],
        )
        for (user_class, outcome, error), count in sorted(series.requests.items()):
            requests.add_metric([*labels, user_class, outcome, error], count)
        yield requests
        for name in TOKEN_COUNTERS:
            kind = name.removesuffix("_tokens_total")
            tokens = CounterMetricFamily(
                PREFIX + name.removesuffix("_total"), f"{kind} tokens (server usage)", labels=ROW_LABELS
            )
            for (token_name, user_class), count in sorted(series.tokens.items()):
                if token_name == name:
                    tokens.add_metric([*labels, user_class], count)
            yield tokens

    def live_families(self, labels: list[str]) -> Iterator[Metric]:
        """The series read now: users, level, phase, steady verdicts, in flight, health, lost and unaccounted."""
        recorder, accounting = self.recorder, self.recorder.accounting
        yield gauge("target_users", "Users Locust is asked to run", labels, recorder.runner.target_user_count)
        yield gauge(
            "level_users", "The level (target users) stamped on the requests starting now", labels, recorder.level
        )
        phase = GaugeMetricFamily(
            PREFIX + "level_phase", "1 for the load shape's phase now", labels=[*RUN_LABELS, "phase"]
        )
        for name in hooks.PHASES:
            phase.add_metric([*labels, name], float(name == self.series.phase))
        yield phase
        steady = GaugeMetricFamily(
            PREFIX + "level_steady", "A held level's steady-state verdict (1 steady)", labels=[*RUN_LABELS, "level"]
        )
        for users, verdict in sorted(self.series.steady.items()):
            steady.add_metric([*labels, str(users)], float(verdict))
        yield steady
        lost = {worker["worker"] for worker in accounting.lost_workers}
        in_flight = sum(count for source, count in self.in_flight.items() if source not in lost)
        yield gauge("requests_in_flight", "Requests being sent or read by the live load generators", labels, in_flight)
        yield process_gauge(
            "client_cpu_percent", "CPU of each load generator (100 = one core)", labels, self.health.latest_cpu
        )
        lag_s = {process: ms / 1000 for process, ms in self.health.latest_lag_ms.items()}
        yield process_gauge("client_loop_lag_seconds", "How late each load generator's event loop ran", labels, lag_s)
        yield gauge("lost_workers", "Workers lost in the run (their unreported rows are missing)", labels, len(lost))
        if (unaccounted := accounting.unaccounted()) is not None:
            yield gauge("unaccounted_requests", "Requests the server finished that have no row", labels, unaccounted)

    def itl_histogram(self) -> Histogram:
        """The run's ITL counts in TOKEN_GAP_BUCKETS_S, read from the recorder while the run's folder is open."""
        if self.recorder.run.folder is not None:
            self.itl = Histogram(TOKEN_GAP_BUCKETS_S)
            for histogram in self.recorder.itl.values():
                for gap_ms, count in histogram.items():
                    self.itl.observe(gap_ms / 1000, count)
        return self.itl

    def _on_test_start(self, **_kw: object) -> None:
        self.series = RunSeries(rows.canaries_counted(self.environment))
        self.itl = Histogram(TOKEN_GAP_BUCKETS_S)
        self.in_flight.clear()

    def _on_rows(self, environment: Environment, rows: list[list[Any]], **_kw: object) -> None:
        if environment is self.environment and self.recorder.run.folder is not None:  # as requests.csv gets them
            for row in rows:
                self.series.add(row)

    def _on_in_flight(self, environment: Environment, source: str, entries: list[list[float]], **_kw: object) -> None:
        if environment is self.environment:
            self.in_flight[source] = len(entries)

    def _on_phase(self, environment: Environment, phase: str = "", **_kw: object) -> None:
        if environment is self.environment:
            self.series.phase = phase

    def _on_level_ended(self, environment: Environment, users: int, verdict: Verdict | None, **_kw: object) -> None:
        if environment is self.environment and verdict is not None:
            self.series.steady[users] = verdict.steady


def gauge(name: str, text: str, labels: list[str], value: float) -> GaugeMetricFamily:
    """One gauge with the run's labels."""
    family = GaugeMetricFamily(PREFIX + name, text, labels=RUN_LABELS)
    family.add_metric(labels, value)
    return family


def process_gauge(name: str, text: str, labels: list[str], by_process: dict[str, float]) -> GaugeMetricFamily:
    """A gauge per load-generating process (a worker id, "master" or "local"): as many as there are processes."""
    family = GaugeMetricFamily(PREFIX + name, text, labels=[*RUN_LABELS, "process"])
    for process, value in sorted(by_process.items()):
        family.add_metric([*labels, process], value)
    return family


def serve(export: PromExport, host: str, port: int) -> WSGIServer:
    """Serve ``export``'s series at ``http://host:port/metrics`` (any path) in the background; raises OSError when
    the port cannot be bound."""
    server = WSGIServer((host, port), make_wsgi_app(export.registry), log=None)
    server.start()
    return server
