"""``server_metrics.csv`` over a run: the scrapes at its start, every interval and at its stop, and the served count;
``gpu_metrics.csv`` beside it from each ``--gpu-metrics-url``. With ``--server-metrics-url`` each replica behind the
router is scraped instead of the target, a row per replica at each scrape."""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING

import gevent

from vllm_stress.core import fleet, schema
from vllm_stress.core.fleet import fleet_row
from vllm_stress.core.roles import DEFAULT_ROLE, split_role
from vllm_stress.master import hooks
from vllm_stress.master.csvappender import CsvAppender
from vllm_stress.master.gpuscraper import GpuScraper
from vllm_stress.master.periodic import Periodic
from vllm_stress.master.replicaset import resolve
from vllm_stress.master.serverscraper import Cell, Exporter, ServerScraper

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.master.runfiles import ServerUnderTest
    from vllm_stress.master.runrecorder import LocalRecorder

log = logging.getLogger(__name__)

# at test stop, how long to wait for the server to finish (or abort) what it still holds: the workers' aborts of
# thousands of streams reach it tens of seconds later on a busy machine
SETTLE_TIMEOUT_S = 60.0
SETTLE_POLL_S = 0.2


class ServerMetrics:
    """The scrapes of each run of the master (or local runner) into the recorder's run folder; ``latest``: the last
    row by column ({} before the first)."""

    def __init__(self, environment: Environment, recorder: LocalRecorder, server: ServerUnderTest) -> None:
        self.environment = environment
        self.recorder = recorder
        self.server = server
        self.scrapers: list[ServerScraper] = []
        self.file: CsvAppender | None = None
        self.gpus: list[GpuScraper] = []
        self.gpu_file: CsvAppender | None = None
        self.baseline: dict[str, Cell] = {}  # the first scrape's row by column (of the replicas finishing requests)
        self.prefill: set[str] = set()  # the replicas --server-metrics-url names prefill instances
        self.sampling = Periodic()
        environment.events.test_start.add_listener(self._start)  # after the recorder's: the run folder is open
        environment.events.test_stop.add_listener(self._stop)

    @property
    def latest(self) -> dict[str, Cell]:
        """The last scrape by column, the replicas' numbers summed (a fleet reads like one server)."""
        return fleet_row([scraper.latest for scraper in self.scrapers])

    def _start(self, **_kw: object) -> None:
        self.scrapers = []
        folder, options = self.recorder.run.folder, self.environment.parsed_options
        if folder is None or options is None or options.server_metrics_interval <= 0:
            return
        named = [split_role(value) for value in options.server_metrics_url]
        replicas = [url for _, url in named] + service_replicas(options.server_metrics_service)
        self.scrapers = self._scrapers(replicas, verify=not options.insecure)
        attach_connectors(self.scrapers, options.connector_metrics_url, verify=not options.insecure)
        roles = {fleet.replica_name(url): role for role, url in named}
        self.prefill = {replica for replica, role in roles.items() if role == "prefill"}
        if any(role != DEFAULT_ROLE for role in roles.values()):  # a P/D fleet: each replica's role, for the analysis
            self.recorder.run.update({"replica_roles": roles})
        self.file = CsvAppender(folder.path, schema.SERVER_METRICS_FILE, schema.SERVER_METRICS_COLUMNS)
        self.gpus = [GpuScraper(url, verify=not options.insecure) for url in options.gpu_metrics_url]  # no API key
        if self.gpus:
            self.gpu_file = CsvAppender(folder.path, schema.GPU_METRICS_FILE, schema.GPU_METRICS_COLUMNS)
        self._scrape()  # the baseline, before the first request
        self.baseline = self._finishing()
        self.recorder.run.update({"server_cache_config": self.scrapers[0].cache_config})  # its KV cache, once per run
        self.sampling.start(options.server_metrics_interval, self._scrape)

    def _stop(self, **_kw: object) -> None:
        self.sampling.stop()
        if self.file:
            self._scrape_settled()  # what the server finished since the last scrape, aborts of the stop included
            self.recorder.account_unreported(self._requests_served())
            self.file.close()
            self.file = None
        if self.gpu_file:
            self.gpu_file.close()
            self.gpu_file = None

    def _scrapers(self, replica_urls: list[str], verify: bool) -> list[ServerScraper]:
        """A scraper per replica URL; without one, the target's /metrics, or each replica's when --host names
        several (client-side spreading)."""
        if not replica_urls:
            hosts = fleet.replica_urls(self.environment.host or "")
            if len(hosts) < 2:
                return [ServerScraper(f"{hosts[0] if hosts else ''}/metrics", self.server.headers, verify=verify)]
            replica_urls = [f"{host}/metrics" for host in hosts]
        return [
            ServerScraper(url, self.server.headers, verify=verify, replica=fleet.replica_name(url))
            for url in replica_urls
        ]

    def _scrape(self) -> list[ServerScraper]:
        """A row per replica that answers, and the replicas that did."""
        now = time.time()
        answered = []
        for scraper in self.scrapers:
            if self.file and (row := scraper.scrape(self.recorder.level, now)):
                self.file.write(row)
                answered.append(scraper)
        if answered:  # the replicas' latest as one row (a replica that failed this scrape counts with its last)
            hooks.server_scraped.fire(environment=self.environment, row=self.latest | {"time": now})
        if self.gpu_file:
            for gpus in self.gpus:
                self.gpu_file.write_rows(gpus.scrape(self.recorder.level))
        return answered

    def _scrape_settled(self) -> None:
        """Scrape until no replica that answers holds a request (at most SETTLE_TIMEOUT_S): the stop's aborts, and the
        requests of a lost worker that the server still streams into the void, reach its counters a step or more
        later. A replica that does not answer (cut off, down) is not waited for: its last numbers cannot change."""
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        answered = self._scrape()
        while time.monotonic() < deadline and any(holds_requests(scraper.latest) for scraper in answered):
            gevent.sleep(SETTLE_POLL_S)
            answered = self._scrape()

    def _finishing(self) -> dict[str, Cell]:
        """The last scrape of the replicas that finish the requests, summed: a P/D fleet's prefill instances also
        count each request they hand on to a decode instance."""
        return fleet_row([scraper.latest for scraper in self.scrapers if scraper.replica not in self.prefill])

    def _requests_served(self) -> int | None:
        """Requests the server finished during the run (every finish reason), or None when it has no such counter."""
        first, last = self.baseline.get("request_success", ""), self._finishing().get("request_success", "")
        if isinstance(first, str) or isinstance(last, str):
            return None
        return int(last - first)


def attach_connectors(scrapers: list[ServerScraper], urls: list[str], verify: bool) -> None:
    """Give the i-th scraper the i-th --connector-metrics-url (its replica's KV connector); the URLs past the last
    replica are logged and left out."""
    for scraper, url in zip(scrapers, urls, strict=False):
        scraper.connector = Exporter(url, verify=verify)
    if len(urls) > len(scrapers):
        log.error(
            "--connector-metrics-url: %d URLs for %d scraped server(s): %s left out",
            len(urls),
            len(scrapers),
            ", ".join(urls[len(scrapers) :]),
        )


def holds_requests(row: dict[str, Cell]) -> bool:
    """A scrape's row shows requests running or waiting."""
    return bool(row.get("running") or row.get("waiting"))


def service_replicas(url: str) -> list[str]:
    """The /metrics URL of each address the host of ``url`` resolves to (a headless Service: one per ready pod),
    sorted; [] for "" or a name that does not resolve (logged)."""
    if not url:
        return []
    try:
        return resolve(url)
    except OSError as e:
        log.error("--server-metrics-service %s: %s; scraping the target instead", url, e)
        return []
