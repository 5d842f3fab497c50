"""One scrape of a server's /metrics into a server_metrics.csv row: parsing, histogram deltas, servers that are not
vLLM's (a loopback HTTP server in the test)."""

from __future__ import annotations

import http.server
import logging
import math
import threading

import pytest

from vllm_stress.core import schema
from vllm_stress.core.fleet import fleet_row
from vllm_stress.core.metrics import histogram_quantile
from vllm_stress.master.servermetrics import attach_connectors
from vllm_stress.master.serverscraper import ServerScraper, parse_metrics


def exposition(running=3, generated=100, ttft_buckets=((0.1, 2), (0.5, 4)), engines=("0", "1")) -> str:
    """A vLLM V1 /metrics text with the same numbers on every engine (a data-parallel server)."""
    lines = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
    ]
    for engine in engines:
        labels = f'engine="{engine}",model_name="m"'
        total = ttft_buckets[-1][1]
        lines += [
            f"vllm:num_requests_running{{{labels}}} {running}",
            f'vllm:num_requests_waiting_by_reason{{{labels},reason="capacity"}} 7',  # not waiting itself
            f"vllm:generation_tokens_total{{{labels}}} {generated}",
            f"vllm:generation_tokens_created{{{labels}}} 1.7e9",
            f'vllm:request_success_total{{{labels},finished_reason="stop"}} 1',
            f'vllm:request_success_total{{{labels},finished_reason="length"}} 2',
            *(f'vllm:time_to_first_token_seconds_bucket{{{labels},le="{le}"}} {n}' for le, n in ttft_buckets),
            f'vllm:time_to_first_token_seconds_bucket{{{labels},le="+Inf"}} {total}',
            f"vllm:time_to_first_token_seconds_count{{{labels}}} {total}",
            f"vllm:time_to_first_token_seconds_sum{{{labels}}} {0.2 * total}",
        ]
    return "\n".join(lines) + "\n"


def column(row: list, name: str):
    return row[schema.SERVER_METRICS_COLUMNS.index(name)]


def test_samples_are_summed_over_engines_and_labels():
    snapshot = parse_metrics(exposition())
    assert snapshot.values["vllm:num_requests_running"] == 6
    assert snapshot.values["vllm:generation_tokens_total"] == 200
    assert snapshot.values["vllm:request_success_total"] == 6  # both finish reasons, both engines
    assert "vllm:num_requests_waiting" not in snapshot.values  # waiting_by_reason is another metric
    assert snapshot.buckets["vllm:time_to_first_token_seconds"] == {0.1: 4, 0.5: 8, math.inf: 8}


def test_a_counter_by_source_keeps_each_source_summed_over_engines():
    """vLLM's prompt tokens by source and its cached ones by tier: one column per label value, engines summed."""
    lines = []
    for engine in ("0", "1"):
        labels = f'engine="{engine}",model_name="m"'
        lines += [
            f'vllm:prompt_tokens_by_source_total{{{labels},source="local_compute"}} {100 + int(engine)}',
            f'vllm:prompt_tokens_by_source_total{{{labels},source="local_cache_hit"}} 30',
            f'vllm:prompt_tokens_by_source_total{{{labels},source="external_kv_transfer"}} 12',
            f'vllm:prompt_tokens_cached_by_source_total{{{labels},source="device"}} 30',
            f'vllm:prompt_tokens_cached_by_source_total{{{labels},source="host"}} 12',
        ]
    row = ServerScraper.row(parse_metrics("\n".join(lines) + "\n"), None, 1000.0, 1)
    assert [column(row, name) for name in schema.SERVER_SOURCE_COUNTERS] == [201, 60, 24, 60, 24, "", "", ""]


def test_quantiles_interpolate_like_promql():
    buckets = {0.1: 10, 0.5: 30, 1.0: 40, math.inf: 40}
    assert histogram_quantile(0.25, buckets) == pytest.approx(0.1)  # rank 10: the top of the first bucket
    assert histogram_quantile(0.5, buckets) == pytest.approx(0.3)  # rank 20: halfway through (0.1, 0.5]
    assert histogram_quantile(0.125, buckets) == pytest.approx(0.05)  # the first bucket starts at 0
    assert histogram_quantile(0.99, {0.1: 1, 1.0: 1, math.inf: 2}) == 1.0  # in +Inf: its lower bound
    assert histogram_quantile(0.5, {0.1: 0, math.inf: 0}) is None


def test_histograms_are_deltas_since_the_previous_scrape():
    first = parse_metrics(exposition(ttft_buckets=((0.1, 2), (0.5, 4))))
    second = parse_metrics(exposition(generated=150, ttft_buckets=((0.1, 2), (0.5, 14))))
    baseline = ServerScraper.row(first, None, 1000.0, 10)
    assert column(baseline, "ttft_count") == "" and column(baseline, "generation_tokens") == 200
    row = ServerScraper.row(second, first, 1001.0, 10)
    assert (column(row, "time"), column(row, "users"), column(row, "running")) == (1001.0, 10, 6)
    assert column(row, "generation_tokens") == 300  # counters stay cumulative
    assert column(row, "ttft_count") == 20  # 10 more per engine, all in (0.1, 0.5]
    assert column(row, "ttft_sum_s") == pytest.approx(0.2 * 20)
    assert column(row, "ttft_p50_s") == pytest.approx(0.3)
    assert column(row, "waiting") == "" and column(row, "e2e_count") == ""  # not exposed: empty
    restarted = ServerScraper.row(first, second, 1002.0, 10)  # counters went down: everything is new
    assert column(restarted, "ttft_count") == 8


class Server(http.server.ThreadingHTTPServer):
    """A loopback HTTP server answering every GET with ``status`` and ``body``."""

    def __init__(self, status: int, body: str) -> None:
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 (http.server's name)
                payload = outer.body.encode()
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.status, self.body = status, body
        self.url = f"http://127.0.0.1:{self.server_address[1]}/metrics"
        threading.Thread(target=self.serve_forever, daemon=True).start()


@pytest.fixture
def server():
    started = []

    def start(status: int, body: str) -> Server:
        started.append(Server(status, body))
        return started[-1]

    yield start
    for s in started:
        s.shutdown()
        s.server_close()


@pytest.mark.parametrize(
    "status,body,problem",
    [
        (404, "Not Found", "Cannot scrape"),
        (200, 'vllm:num_requests_running{engine="0" oops\n', "Cannot scrape"),  # not the Prometheus format
        (200, "<html>a proxy's page</html>", "has none of vLLM's metrics"),
        (200, "# TYPE http_requests_total counter\nhttp_requests_total 5\n", "has none of vLLM's metrics"),
    ],
)
def test_a_server_without_vllm_metrics_gives_no_rows_and_one_warning(server, caplog, status, body, problem):
    scraper = ServerScraper(server(status, body).url)
    with caplog.at_level(logging.WARNING, logger="vllm_stress.master.serverscraper"):
        assert [scraper.scrape(users=1) for _ in range(3)] == [None, None, None]
    assert len(caplog.records) == 1 and problem in caplog.records[0].getMessage()


def test_a_server_with_some_metrics_fills_their_columns(server, caplog):
    scraper = ServerScraper(server(200, exposition()).url)
    with caplog.at_level(logging.WARNING, logger="vllm_stress.master.serverscraper"):
        rows = [scraper.scrape(users=5) for _ in range(2)]
    assert [column(r, "running") for r in rows] == [6, 6]
    assert column(rows[1], "ttft_count") == 0 and column(rows[1], "ttft_p50_s") == ""  # nothing new
    assert column(rows[1], "kv_cache_usage") == "" and scraper.latest["running"] == 6
    assert len(caplog.records) == 1 and "vllm:kv_cache_usage_perc" in caplog.records[0].getMessage()


LMCACHE = """# TYPE lmcache:num_lookup_tokens counter
lmcache:num_lookup_tokens_total{model_name="m",worker_id="0"} 900
lmcache:num_lookup_hits_total{model_name="m",worker_id="0"} 300
lmcache:num_stored_tokens_total{model_name="m",worker_id="0"} 640
process_resident_memory_bytes 1e9
"""


def test_the_kv_connectors_own_counters_join_the_servers_row(server, caplog):
    """--connector-metrics-url: LMCache's lookup and store counters in the server's row, nothing else of its page
    (its process's memory is not the server's); a connector that stops answering leaves them empty, said once."""
    scraper = ServerScraper(server(200, exposition()).url)
    connector = server(200, LMCACHE)
    attach_connectors([scraper], [connector.url], verify=True)
    row = scraper.scrape(users=2)
    assert (column(row, "connector_lookup_tokens"), column(row, "connector_lookup_hits")) == (900, 300)
    assert column(row, "connector_stored_tokens") == 640 and column(row, "resident_memory") == ""
    connector.status = 503
    with caplog.at_level(logging.WARNING, logger="vllm_stress.master.serverscraper"):
        rows = [scraper.scrape(users=2) for _ in range(2)]
    assert [column(r, "connector_lookup_tokens") for r in rows] == ["", ""] and column(rows[0], "running") == 6
    assert sum("Cannot scrape the KV connector's" in r.getMessage() for r in caplog.records) == 1


def test_connector_urls_past_the_replicas_are_left_out(caplog):
    scrapers = [ServerScraper("http://127.0.0.1:1/metrics")]
    with caplog.at_level(logging.ERROR, logger="vllm_stress.master.servermetrics"):
        attach_connectors(scrapers, ["http://a/metrics", "http://b/metrics"], verify=True)
    assert scrapers[0].connector is not None and scrapers[0].connector.url == "http://a/metrics"
    assert "2 URLs for 1 scraped server(s): http://b/metrics left out" in caplog.text


def test_unreachable_server_gives_no_rows(server):
    gone = server(200, "")
    gone.shutdown()
    gone.server_close()
    assert ServerScraper(gone.url).scrape(users=1) is None


def test_replicas_of_one_scrape_read_as_one_server():
    """The live dashboard's fleet: counts summed, the KV cache's share averaged, a quantile the slowest replica's."""
    first = {"time": 5.0, "users": 8, "replica": "a:1", "running": 3, "kv_cache_usage": 0.2, "ttft_p99_s": 0.5}
    second = {"time": 5.0, "users": 8, "replica": "b:1", "running": 1, "kv_cache_usage": 0.4, "ttft_p99_s": ""}
    fleet = fleet_row([first, second])
    assert fleet == {
        "time": 5.0,
        "users": 8,
        "replica": "a:1",
        "running": 4,
        "kv_cache_usage": pytest.approx(0.3),
        "ttft_p99_s": 0.5,
    }
    assert fleet_row([first]) == first and fleet_row([]) == {}
