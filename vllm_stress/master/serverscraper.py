"""One scrape of the server's Prometheus ``/metrics``, turned into a ``server_metrics.csv`` row (no Locust import)."""

from __future__ import annotations

import logging
import time
from collections import defaultdict

import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_stress.core import schema
from vllm_stress.core.metrics import histogram_quantile
from vllm_stress.core.served import cache_config
from vllm_stress.master.lorascrape import lora_values

log = logging.getLogger(__name__)

SCRAPE_TIMEOUT_S = 5.0

_HISTOGRAM_PARTS = ("_bucket", "_count", "_sum")
_SCALARS = {*schema.SERVER_GAUGES.values(), *schema.SERVER_COUNTERS.values()}
_EXPECTED = _SCALARS - schema.SERVER_OPTIONAL  # those whose absence is warned about
_EXPECTED_HISTOGRAMS = set(schema.SERVER_HISTOGRAMS.values()) - schema.SERVER_OPTIONAL
_BY_SOURCE = {sample for sample, _ in schema.SERVER_SOURCE_COUNTERS.values()}  # kept per source label, not summed
_SAMPLES = _SCALARS | _BY_SOURCE
_SAMPLES |= {name + part for name in schema.SERVER_HISTOGRAMS.values() for part in _HISTOGRAM_PARTS}
_LINE_STARTS = tuple(name + end for name in _SAMPLES for end in ("{", " "))  # exact sample names, labels or not
_CONNECTOR_SAMPLES = tuple(schema.SERVER_COUNTERS[column] for column in schema.CONNECTOR_COUNTERS)

Cell = float | int | str  # a CSV cell: a number, or "" when unknown


class Snapshot:
    """One scrape: ``values`` {sample name: value} and ``buckets`` {histogram: {upper bound: cumulative count}},
    each summed over its label sets (engines, finish reasons, models); a counter by source also under
    ``by_source(name, source)`` for each source."""

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
                if sample.name in _BY_SOURCE:
                    snapshot.values[by_source(sample.name, sample.labels.get("source", ""))] += sample.value
    return snapshot


def by_source(sample: str, source: str) -> str:
    """The key in ``Snapshot.values`` of a by-source counter's value for one ``source``."""
    return sample + "{source=" + repr(source) + "}"


def cell(value: float | None) -> Cell:
    """A number as the CSV shows it: integers without a fraction, others to 6 digits, "" when unknown."""
    if value is None:
        return ""
    return int(value) if float(value).is_integer() else round(value, 6)


class Exporter:
    """One Prometheus ``/metrics`` URL: its HTTP session, and each problem with it logged once."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, verify: bool = True) -> None:
        self.url = url
        self.session = requests.Session()
        self.session.headers.update(headers or {})
        self.verify = verify
        self.warned: set[str] = set()

    def text(self) -> str:
        """The exposition; raises requests.RequestException when there is none."""
        response = self.session.get(self.url, timeout=SCRAPE_TIMEOUT_S, verify=self.verify)
        response.raise_for_status()
        return response.text

    def warn_once(self, problem: str, message: str, *args: object) -> None:
        """Log ``message`` the first time ``problem`` happens to this URL."""
        if problem not in self.warned:
            self.warned.add(problem)
            log.warning(message, *args)


class ServerScraper(Exporter):
    """Scrapes one ``/metrics`` URL; ``scrape(users)`` returns the ``server_metrics.csv`` row, or None. ``replica``
    fills the row's replica column: a --server-metrics-url's host:port, "" for the target itself."""

    def __init__(self, url: str, headers: dict[str, str] | None = None, verify: bool = True, replica: str = "") -> None:
        super().__init__(url, headers, verify)
        self.replica = replica
        self.connector: Exporter | None = None  # its KV connector's own /metrics (--connector-metrics-url)
        self.previous: Snapshot | None = None
        self.latest: dict[str, Cell] = {}  # the last row by column
        self.cache_config: dict[str, int] | None = None  # the server's KV-cache blocks, from its first scrape

    def scrape(self, users: int, now: float | None = None) -> list[Cell] | None:
        """The row of a scrape now (or at ``now``, the time every replica's row of one scrape shares)."""
        try:
            text = self.text()
            snapshot = parse_metrics(text)
            self.cache_config = self.cache_config or cache_config(text)
        except (requests.RequestException, ValueError) as e:
            self.warn_once(
                "unreachable", "Cannot scrape %s (%s): no server_metrics.csv rows while this lasts", self.url, e
            )
            return None
        if self.connector:
            self.add_connector(snapshot)
        missing = sorted(name for name in _EXPECTED if name not in snapshot.values)
        missing += sorted(name for name in _EXPECTED_HISTOGRAMS if name not in snapshot.buckets)
        if len(missing) == len(_EXPECTED) + len(_EXPECTED_HISTOGRAMS):
            self.warn_once(
                "foreign", "%s has none of vLLM's metrics (%s ...): no server_metrics.csv rows", self.url, missing[0]
            )
            return None
        if missing:
            self.warn_once(
                "partial", "%s lacks %s: those server_metrics.csv columns stay empty", self.url, ", ".join(missing)
            )
        row = self.row(snapshot, self.previous, now or time.time(), users, self.replica, lora_values(text))
        self.previous = snapshot
        self.latest = dict(zip(schema.SERVER_METRICS_COLUMNS, row, strict=True))
        return row

    def add_connector(self, snapshot: Snapshot) -> None:
        """Put the connector's lookup and store counters into ``snapshot``, in place of any the server's /metrics had
        (the same counters, where LMCache shares vLLM's); left out while it does not answer (logged once)."""
        assert self.connector is not None
        try:
            counters = parse_metrics(self.connector.text()).values
        except (requests.RequestException, ValueError) as e:
            self.connector.warn_once(
                "unreachable", "Cannot scrape the KV connector's %s (%s): its columns stay empty", self.connector.url, e
            )
            return
        for name in _CONNECTOR_SAMPLES:
            if name in counters:
                snapshot.values[name] = counters[name]

    @staticmethod
    def row(
        snapshot: Snapshot,
        previous: Snapshot | None,
        now: float,
        users: int,
        replica: str = "",
        lora: dict[str, float] | None = None,
    ) -> list[Cell]:
        """The row of ``snapshot`` from ``replica``: gauges and counters as scraped, histograms since ``previous``
        (empty without), then the ``lora`` columns (lorascrape.py; empty without)."""
        values = snapshot.values
        row: list[Cell] = [round(now, 3), users, replica]
        row += [cell(values.get(name)) for name in schema.SERVER_GAUGES.values()]
        row += [cell(values.get(name)) for name in schema.SERVER_COUNTERS.values()]
        row += [cell(values.get(by_source(*counter))) for counter in schema.SERVER_SOURCE_COUNTERS.values()]
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
            row += [cell(count), cell(total)]
            row += [cell(histogram_quantile(q, buckets)) for q in schema.SERVER_QUANTILES.values()]
        return row + [cell((lora or {}).get(column)) for column in schema.SERVER_LORA_COLUMNS]
