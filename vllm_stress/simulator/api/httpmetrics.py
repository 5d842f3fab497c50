"""HTTP-level metrics of ``prometheus_fastapi_instrumentator``, which vLLM mounts on the same registry
(docs/concepts/simulator.md, section 11)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric, SummaryMetricFamily
from prometheus_client.utils import floatToGoString

from vllm_stress.core.histogram import Histogram

from .metrics import NamedHistogram

EXCLUDED_HANDLERS = frozenset({"/metrics", "/health", "/load", "/ping", "/version", "/server_info"})
HIGHR_BUCKETS = [
    0.01,
    0.025,
    0.05,
    0.075,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    1.5,
    2.0,
    2.5,
    3.0,
    3.5,
    4.0,
    4.5,
    5.0,
    7.5,
    10.0,
    30.0,
    60.0,
]
LOWR_BUCKETS = [0.1, 0.5, 1.0]


@dataclass
class Sizes:
    """A size summary's observations: how many, and their bytes."""

    count: int = 0
    total: int = 0


class HttpMetrics:
    """Collector of per-request HTTP observations (one ``observe`` per instrumented request)."""

    def __init__(self) -> None:
        self.requests: defaultdict[tuple[str, str, str], int] = defaultdict(int)
        self.request_sizes: defaultdict[str, Sizes] = defaultdict(Sizes)
        self.response_sizes: defaultdict[str, Sizes] = defaultdict(Sizes)
        self.highr = NamedHistogram(
            "http_request_duration_highr_seconds",
            "Latency with many buckets but no API specific labels.",
            HIGHR_BUCKETS,
        )
        self.durations: dict[tuple[str, str], Histogram] = {}

    def observe(
        self, handler: str, method: str, status: int, request_bytes: int, response_bytes: int, seconds: float
    ) -> None:
        if handler in EXCLUDED_HANDLERS:
            return
        self.requests[handler, method, f"{status // 100}xx"] += 1
        for sizes, size in (
            (self.request_sizes[handler], request_bytes),
            (self.response_sizes[handler], response_bytes),
        ):
            sizes.count += 1
            sizes.total += size
        self.highr.observe(seconds)
        if (handler, method) not in self.durations:
            self.durations[handler, method] = Histogram(LOWR_BUCKETS)
        self.durations[handler, method].observe(seconds)

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "http_requests",
            "Total number of requests by method, status and handler.",
            labels=["handler", "method", "status"],
        )
        for labels, count in self.requests.items():
            requests.add_metric(list(labels), count)
        yield requests
        for name, documentation, sizes in (
            ("http_request_size_bytes", "Content length of incoming requests by handler.", self.request_sizes),
            ("http_response_size_bytes", "Content length of outgoing responses by handler.", self.response_sizes),
        ):
            summary = SummaryMetricFamily(name, documentation, labels=["handler"])
            for handler, observed in sizes.items():
                summary.add_metric([handler], observed.count, observed.total)
            yield summary
        yield self.highr.family([], ())
        durations = HistogramMetricFamily(
            "http_request_duration_seconds", "Latency with only few buckets by handler.", labels=["handler", "method"]
        )
        for handler_method, histogram in self.durations.items():
            durations.add_metric(list(handler_method), histogram.buckets(floatToGoString), histogram.sum)
        yield durations
