"""The server's own view and the load generators' health during a run: ``server_metrics.csv`` and ``client_health.csv``.

The master (or the local runner) scrapes the target's Prometheus ``/metrics`` at test start (the baseline), every
``--server-metrics-interval`` seconds and at test stop until the server holds no request (at most
SETTLE_TIMEOUT_S), and appends one row per scrape (columns and metric names in ``vllm_stress.core.schema``). Histograms are
written as the observations since the previous scrape. A server
without ``/metrics``, or with other metric names, gets one WARNING per problem; the run goes on and the file gets
the columns the server has (or no rows). The last scrape's request count minus the run's rows is the run's
``unaccounted_requests`` (``Recorder.account_unreported``).

It also appends the CPU of every load-generating process to ``client_health.csv``: its own every
``CLIENT_HEALTH_INTERVAL_S``, each worker's with every worker report (the worker measures itself since its previous
report), and keeps the highest per level, so that a level where the load generator was saturated is not read as
the server's.

No Locust import (importing Locust monkey-patches the process), so the parsing is unit-tested directly. Both loops
are greenlets: under Locust ``requests`` is cooperative.
"""

from __future__ import annotations

import csv
import logging
import os
import time
from collections import defaultdict

import gevent
import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_stress.core import schema
from vllm_stress.core.metrics import histogram_quantile

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 5.0
SETTLE_TIMEOUT_S = 10.0  # at test stop, how long to wait for the server to finish (or abort) what it still holds
CLIENT_HEALTH_INTERVAL_S = 5.0
LAG_PROBE_S = 0.05  # how often each process checks how late its event loop runs
CPU_REPORT_KEY = "vllm_stress_cpu"

_HISTOGRAM_PARTS = ("_bucket", "_count", "_sum")
_SCALARS = {*schema.SERVER_GAUGES.values(), *schema.SERVER_COUNTERS.values()}
_SAMPLES = _SCALARS | {name + part for name in schema.SERVER_HISTOGRAMS.values() for part in _HISTOGRAM_PARTS}
_LINE_STARTS = tuple(name + end for name in _SAMPLES for end in ("{", " "))  # exact sample names, labels or not


class Snapshot:
    """One scrape: ``values`` {sample name: value} and ``buckets`` {histogram: {upper bound: cumulative count}},
    each summed over its label sets (engines, finish reasons, models)."""

    def __init__(self) -> None:
        self.values: dict[str, float] = defaultdict(float)
        self.buckets: dict[str, dict[float, float]] = defaultdict(lambda: defaultdict(float))


def parse_metrics(text: str) -> Snapshot:
    """The samples of ``schema.SERVER_*`` in a Prometheus text exposition; raises ValueError when it is not one."""
    snapshot = Snapshot()
    wanted = "\n".join(line for line in text.splitlines() if line.startswith(_LINE_STARTS))  # parsing all costs 10 ms
    for family in text_string_to_metric_families(wanted):
        for sample in family.samples:
            if sample.name.endswith("_bucket"):
                snapshot.buckets[sample.name.removesuffix("_bucket")][float(sample.labels["le"])] += sample.value
            else:
                snapshot.values[sample.name] += sample.value
    return snapshot


def _number(value: float | None):
    if value is None:
        return ""
    return int(value) if float(value).is_integer() else round(value, 6)


class ServerScraper:
    """Scrapes one ``/metrics`` URL; ``scrape(users)`` returns the ``server_metrics.csv`` row, or None."""

    def __init__(self, url: str, headers: dict | None = None, verify: bool = True) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update(headers or {})
        self.verify = verify
        self.previous: Snapshot | None = None
        self.latest: dict[str, float | int | str] = {}  # the last row by column
        self.warned: set[str] = set()

    def scrape(self, users: int) -> list | None:
        try:
            response = self.session.get(self.url, timeout=SCRAPE_TIMEOUT_S, verify=self.verify)
            response.raise_for_status()
            snapshot = parse_metrics(response.text)
        except (requests.RequestException, ValueError) as e:
            self._warn_once(
                "unreachable", "Cannot scrape %s (%s): no server_metrics.csv rows while this lasts", self.url, e
            )
            return None
        missing = sorted(name for name in _SCALARS if name not in snapshot.values)
        missing += sorted(name for name in schema.SERVER_HISTOGRAMS.values() if name not in snapshot.buckets)
        if len(missing) == len(_SCALARS) + len(schema.SERVER_HISTOGRAMS):
            self._warn_once(
                "foreign", "%s has none of vLLM's metrics (%s ...): no server_metrics.csv rows", self.url, missing[0]
            )
            return None
        if missing:
            self._warn_once(
                "partial", "%s lacks %s: those server_metrics.csv columns stay empty", self.url, ", ".join(missing)
            )
        row = self.row(snapshot, self.previous, time.time(), users)
        self.previous = snapshot
        self.latest = dict(zip(schema.SERVER_METRICS_COLUMNS, row, strict=True))
        return row

    @staticmethod
    def row(snapshot: Snapshot, previous: Snapshot | None, now: float, users: int) -> list:
        """The row of ``snapshot``: gauges and counters as scraped, histograms since ``previous`` (empty without)."""
        values = snapshot.values
        row = [round(now, 3), users]
        row += [_number(values.get(name)) for name in schema.SERVER_GAUGES.values()]
        row += [_number(values.get(name)) for name in schema.SERVER_COUNTERS.values()]
        for name in schema.SERVER_HISTOGRAMS.values():
            if previous is None or name not in snapshot.buckets:
                row += [""] * (2 + len(schema.SERVER_QUANTILES))
                continue
            count, total, buckets = values[name + "_count"], values[name + "_sum"], snapshot.buckets[name]
            before = previous.buckets.get(name, {})
            delta = {upper: n - before.get(upper, 0.0) for upper, n in buckets.items()}
            if min(delta.values()) >= 0:  # else the server restarted: everything it has is new
                count -= previous.values[name + "_count"]
                total -= previous.values[name + "_sum"]
                buckets = delta
            row += [_number(count), _number(total)]
            row += [_number(histogram_quantile(q, buckets)) for q in schema.SERVER_QUANTILES.values()]
        return row

    def _warn_once(self, problem: str, message: str, *args) -> None:
        if problem not in self.warned:
            self.warned.add(problem)
            log.warning(message, *args)


class CpuMeter:
    """This process's CPU (user + system, every thread) since the previous reading, in percent of one core.

    Measured here rather than taken from Locust, whose figure is refreshed every 10 s and reads 0 until its second
    measurement: a short level would look idle."""

    def __init__(self) -> None:
        self.cpu_s, self.wall_s = time.process_time(), time.perf_counter()

    def percent(self) -> float:
        cpu_s, wall_s = time.process_time(), time.perf_counter()
        elapsed = wall_s - self.wall_s
        share = (cpu_s - self.cpu_s) / elapsed if elapsed > 0 else 0.0
        self.cpu_s, self.wall_s = cpu_s, wall_s
        return 100 * share


class LoopLagMeter:
    """How late this process's event loop runs its timers: a greenlet sleeps LAG_PROBE_S again and again and notes
    how much later than asked it woke. A process with little CPU of its own can still wait for a core (a server on
    the same host, other load): then the timestamps it takes are late by about as much. ``mean_ms`` is the mean
    lateness since the previous reading (a mean, so that one garbage collection does not look like starvation)."""

    def __init__(self) -> None:
        self.late_s, self.probes = 0.0, 0
        self.greenlet = gevent.spawn(self._probe)

    def _probe(self) -> None:
        while True:
            asked = time.perf_counter() + LAG_PROBE_S
            gevent.sleep(LAG_PROBE_S)
            self.late_s += max(time.perf_counter() - asked, 0.0)
            self.probes += 1

    def mean_ms(self) -> float:
        mean = self.late_s / self.probes if self.probes else 0.0
        self.late_s, self.probes = 0.0, 0
        return mean * 1000


def report_worker_cpu(environment) -> None:
    """On a worker: send its CPU and event-loop lag since the previous report with every worker report (3 s)."""
    meter, lag = CpuMeter(), LoopLagMeter()

    def add_cpu(client_id, data, **_kw) -> None:
        data[CPU_REPORT_KEY] = [meter.percent(), lag.mean_ms()]

    environment.events.report_to_master.add_listener(add_cpu)


class CsvAppender:
    """A CSV file in the run folder with its header; every row is flushed."""

    def __init__(self, folder: str, name: str, columns: list[str]) -> None:
        self.file = open(os.path.join(folder, name), "w", newline="", encoding="utf-8")  # noqa: SIM115 (kept open)
        self.writer = csv.writer(self.file)
        self.write(columns)

    def write(self, row: list) -> None:
        self.writer.writerow(row)
        self.file.flush()

    def close(self) -> None:
        self.file.close()


class Telemetry:
    """The scrapes and the client CPU of each run of a master (or local runner), into the recorder's run folder."""

    def __init__(self, environment, recorder) -> None:
        self.environment = environment
        self.recorder = recorder
        self.scraper: ServerScraper | None = None
        self.max_cpu_by_level: dict[int, float] = {}  # the highest CPU % of any load generator while at a level
        self.latest_cpu: dict[str, float] = {}  # by process: its last figure
        self.cpu_meter = CpuMeter()
        self.lag_meter = LoopLagMeter()
        self.own_name = recorder.worker_id  # "master" or "local"
        self.server_metrics: CsvAppender | None = None
        self.baseline: dict = {}  # the first scrape's row by column
        self.client_health: CsvAppender | None = None
        self.greenlets: list[gevent.Greenlet] = []
        environment.events.test_start.add_listener(self._start)  # after the recorder's: the run folder is open
        environment.events.test_stop.add_listener(self._stop)
        environment.events.worker_report.add_listener(self._on_worker_report)

    def _start(self, environment, **_kw) -> None:
        if not self.recorder.folder:
            return
        folder = self.recorder.folder.path
        self.scraper = None
        self.max_cpu_by_level.clear()
        self.latest_cpu.clear()
        self.cpu_meter.percent()  # from now on
        self.lag_meter.mean_ms()
        self.client_health = CsvAppender(folder, schema.CLIENT_HEALTH_FILE, schema.CLIENT_HEALTH_COLUMNS)
        self.greenlets = [gevent.spawn(self._repeat, CLIENT_HEALTH_INTERVAL_S, self._record_cpu)]
        options = environment.parsed_options
        if options.server_metrics_interval > 0:
            self.scraper = ServerScraper(
                environment.host.rstrip("/") + "/metrics", environment.llm_target.headers, verify=not options.insecure
            )
            self.server_metrics = CsvAppender(folder, schema.SERVER_METRICS_FILE, schema.SERVER_METRICS_COLUMNS)
            self._scrape()  # the baseline, before the first request
            self.baseline = dict(self.scraper.latest)
            self.greenlets.append(gevent.spawn(self._repeat, options.server_metrics_interval, self._scrape))

    def _stop(self, environment, **_kw) -> None:
        gevent.killall(self.greenlets)
        self.greenlets = []
        if self.client_health:
            self._record_cpu()
            self.client_health.close()
            self.client_health = None
        if self.server_metrics:
            self._scrape_settled()  # what the server finished since the last scrape, aborts of the stop included
            self.recorder.account_unreported(self._requests_served())
            self.server_metrics.close()
            self.server_metrics = None

    @staticmethod
    def _repeat(interval: float, action) -> None:
        while True:
            gevent.sleep(interval)
            action()

    def _scrape(self) -> None:
        if row := self.scraper.scrape(self.recorder.level):
            self.server_metrics.write(row)

    def _scrape_settled(self) -> None:
        """Scrape until the server holds no request (at most SETTLE_TIMEOUT_S): the stop's aborts, and the requests
        of a lost worker that the server still streams into the void, reach its counters a step or more later."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        self._scrape()
        while time.monotonic() < deadline and (
            self.scraper.latest.get("running") or self.scraper.latest.get("waiting")
        ):
            gevent.sleep(0.2)
            self._scrape()

    def _requests_served(self) -> int | None:
        """Requests the server finished during the run (every finish reason), or None when it has no such counter."""
        first, last = self.baseline.get("request_success", ""), self.scraper.latest.get("request_success", "")
        return None if first == "" or last == "" else int(last - first)

    def _record_cpu(self) -> None:
        self._write_cpu(self.own_name, self.cpu_meter.percent(), self.lag_meter.mean_ms())

    def _on_worker_report(self, client_id, data, **_kw) -> None:
        if CPU_REPORT_KEY in data and self.client_health:
            self._write_cpu(client_id, *data[CPU_REPORT_KEY])

    def _write_cpu(self, process: str, percent: float, lag_ms: float) -> None:
        users = self.recorder.level
        self.client_health.write([round(time.time(), 3), users, process, round(percent, 1), round(lag_ms, 1)])
        self.latest_cpu[process] = percent
        self.max_cpu_by_level[users] = max(self.max_cpu_by_level.get(users, 0.0), percent)
