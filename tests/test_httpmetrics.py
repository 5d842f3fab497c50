"""vllm_stress.simulator.api.httpmetrics: the HTTP-level families of prometheus_fastapi_instrumentator, as vLLM exposes
them, from the observations of the simulator's routes (read back through prometheus_client's exposition)."""

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from vllm_stress.simulator.api.httpmetrics import HIGHR_BUCKETS, LOWR_BUCKETS, HttpMetrics

CHAT = "/v1/chat/completions"


@pytest.fixture
def exposed():
    """Observations of four instrumented requests and two that are not; {(sample, labels): value} exposed."""
    metrics = HttpMetrics()
    metrics.observe(CHAT, "POST", 200, 300, 5000, 0.02)
    metrics.observe(CHAT, "POST", 200, 100, 1000, 0.3)
    metrics.observe(CHAT, "POST", 400, 50, 120, 0.004)
    metrics.observe("/tokenize", "POST", 200, 40, 30, 2.0)
    metrics.observe("/metrics", "GET", 200, 0, 9000, 0.01)
    metrics.observe("/health", "GET", 200, 0, 0, 0.001)
    registry = CollectorRegistry()
    registry.register(metrics)
    families = text_string_to_metric_families(generate_latest(registry).decode())
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for family in families for s in family.samples}


def test_requests_are_counted_by_handler_method_and_status_class(exposed):
    totals = {labels: value for (name, labels), value in exposed.items() if name == "http_requests_total"}
    assert totals == {
        (("handler", CHAT), ("method", "POST"), ("status", "2xx")): 2,
        (("handler", CHAT), ("method", "POST"), ("status", "4xx")): 1,
        (("handler", "/tokenize"), ("method", "POST"), ("status", "2xx")): 1,
    }  # /metrics and /health are not instrumented


def test_sizes_are_summaries_by_handler(exposed):
    chat = (("handler", CHAT),)
    assert exposed["http_request_size_bytes_count", chat] == 3 and exposed["http_request_size_bytes_sum", chat] == 450
    assert exposed["http_response_size_bytes_sum", chat] == 6120
    assert exposed["http_response_size_bytes_count", (("handler", "/tokenize"),)] == 1


def test_durations_in_the_many_buckets_without_labels_and_the_few_by_handler(exposed):
    highr = {
        float(dict(labels)["le"]): value
        for (name, labels), value in exposed.items()
        if name == "http_request_duration_highr_seconds_bucket"
    }
    assert sorted(highr) == [*HIGHR_BUCKETS, float("inf")]
    assert (highr[0.01], highr[0.025], highr[0.25], highr[0.5], highr[2.0], highr[float("inf")]) == (1, 2, 2, 3, 4, 4)
    assert exposed["http_request_duration_highr_seconds_sum", ()] == pytest.approx(2.324)
    chat = {
        dict(labels)["le"]: value
        for (name, labels), value in exposed.items()
        if name == "http_request_duration_seconds_bucket" and dict(labels)["handler"] == CHAT
    }
    assert chat == {str(bound): count for bound, count in zip(LOWR_BUCKETS, (2, 3, 3), strict=True)} | {"+Inf": 3}
