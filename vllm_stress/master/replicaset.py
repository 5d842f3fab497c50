"""The replica set over time into ``replicas.csv``: every --server-metrics-interval, each replica known — each
--server-metrics-url (answering or not), and each address the --server-metrics-service name resolves to now or did
before (a headless Service lists its ready pods) — looked at once: up or not, its running and waiting requests. A
fleet that an autoscaler grows and shrinks is seen joining and leaving (vllm_stress.analysis.features.replica_set
reads it)."""

from __future__ import annotations

import logging
import socket
import time
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import requests

from vllm_stress.core import fleet, schema
from vllm_stress.master.csvappender import CsvAppender
from vllm_stress.master.periodic import Periodic
from vllm_stress.master.serverscraper import Cell, cell, parse_metrics

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.master.runfiles import ServerUnderTest
    from vllm_stress.master.runrecorder import LocalRecorder

log = logging.getLogger(__name__)

LOOK_TIMEOUT_S = 2.0  # a replica slower than this to answer /metrics counts as down at that look
RUNNING, WAITING = schema.SERVER_GAUGES["running"], schema.SERVER_GAUGES["waiting"]


def resolve(url: str) -> list[str]:
    """The /metrics URL of each address the host of ``url`` resolves to, sorted; OSError when it does not resolve."""
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    hosts = [f"[{a}]" if ":" in a else a for a in sorted({str(info[4][0]) for info in infos})]
    return [parts._replace(netloc=f"{host}:{port}").geturl() for host in hosts]


def look(session: requests.Session, url: str, verify: bool = True) -> tuple[int, Cell, Cell]:
    """(up, running, waiting) of the replica whose /metrics is ``url``: up when it answers with vLLM's gauges."""
    try:
        response = session.get(url, timeout=LOOK_TIMEOUT_S, verify=verify)
        response.raise_for_status()
        values = parse_metrics(response.text).values
    except (requests.RequestException, ValueError):
        return 0, "", ""
    if RUNNING not in values:
        return 0, "", ""
    return 1, cell(values[RUNNING]), cell(values.get(WAITING))


class ReplicaSet:
    """Follows the replica set of a run of the master (or local runner) when it names replicas."""

    def __init__(self, environment: Environment, recorder: LocalRecorder, server: ServerUnderTest) -> None:
        self.environment = environment
        self.recorder = recorder
        self.session = requests.Session()
        self.session.headers.update(server.headers)
        self.known: set[str] = set()  # every /metrics URL seen so far
        self.file: CsvAppender | None = None
        self.sampling = Periodic()
        environment.events.test_start.add_listener(self._start)
        environment.events.test_stop.add_listener(self._stop)

    def _start(self, **_kw: object) -> None:
        folder, options = self.recorder.run.folder, self.environment.parsed_options
        if folder is None or options is None or options.server_metrics_interval <= 0:
            return
        if not options.server_metrics_url and not options.server_metrics_service:
            return
        self.known = set(options.server_metrics_url)
        self.file = CsvAppender(folder.path, schema.REPLICAS_FILE, schema.REPLICA_COLUMNS)
        self.look_all()
        self.sampling.start(options.server_metrics_interval, self.look_all)

    def _stop(self, **_kw: object) -> None:
        self.sampling.stop()
        if self.file:
            self.look_all()
            self.file.close()
            self.file = None

    def listed(self) -> set[str]:
        """The /metrics URLs the replica set has now: the listed ones and the Service's current addresses."""
        options = self.environment.parsed_options
        urls = set(options.server_metrics_url) if options else set()
        service = options.server_metrics_service if options else ""
        if service:
            try:
                urls |= set(resolve(service))
            except OSError as e:
                log.warning("--server-metrics-service %s does not resolve now (%s): no replica in it", service, e)
        return urls

    def look_all(self) -> None:
        """One row per replica known, all with this look's time."""
        now, listed = time.time(), self.listed()
        self.known |= listed
        verify = not getattr(self.environment.parsed_options, "insecure", False)
        rows = [
            [
                round(now, 3),
                fleet.replica_name(url),
                *(look(self.session, url, verify) if url in listed else (0, "", "")),
            ]
            for url in sorted(self.known)
        ]
        if self.file:
            self.file.write_rows(rows)
