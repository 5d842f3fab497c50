"""The CPU tier's own metrics, as a KV connector keeps them beside vLLM's: LMCache's lookup and store counters (their
names and help from LMCache's observability module), served at ``/connector/metrics`` when the simulator has a CPU
tier, as LMCache's internal API server serves them on a port of its own (the suite's --connector-metrics-url)."""

from __future__ import annotations

from collections.abc import Iterator

from aiohttp import web
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.registry import Collector

from ..engine.kvcache import KVCache


class ConnectorMetrics(Collector):
    """The counters of ``kv``'s CPU tier under LMCache's names."""

    def __init__(self, kv: KVCache, model_name: str) -> None:
        assert kv.host is not None
        self.kv, self.host = kv, kv.host
        self.labels = {"model_name": model_name, "worker_id": "0"}
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def collect(self) -> Iterator[CounterMetricFamily]:
        stored = self.host.num_stored * self.kv.block_size
        counters = (
            ("num_lookup_tokens", "Total number of tokens requested in lookup from lmcache", self.host.lookup_tokens),
            ("num_lookup_hits", "Total number of tokens hit in lookup from lmcache", self.host.lookup_hits),
            ("num_stored_tokens", "Total number of tokens stored in lmcache", stored),
        )
        for name, documentation, value in counters:
            family = CounterMetricFamily(f"lmcache:{name}", documentation, labels=list(self.labels))
            family.add_metric(list(self.labels.values()), value)
            yield family

    def attach(self, app: web.Application) -> None:
        app.router.add_get("/connector/metrics", self.text)

    async def text(self, _request: web.Request) -> web.Response:
        response = web.Response(body=generate_latest(self.registry))
        response.headers["Content-Type"] = CONTENT_TYPE_PLAIN_0_0_4
        return response
