"""What the master scrapes and receives besides the requests: the server's metrics, GPU metrics, request spans, and
the load generator's own Prometheus series."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import COMMAND_LINE

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup

# why 5 s (a scrape costs the server CPU): docs/concepts/load-generator.md, "The server's metrics"
DEFAULT_SERVER_METRICS_INTERVAL_S = 5.0


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--no-traceparent",
        action="store_true",
        default=False,
        help="Do not send a W3C traceparent header (by default each request's trace id is derived from its "
        "X-Request-Id, so a server's OpenTelemetry span of it joins its row: --otlp-port)",
    )
    group.add_argument(
        "--server-metrics-interval",
        type=float,
        default=DEFAULT_SERVER_METRICS_INTERVAL_S,
        help="Seconds between scrapes of the server's Prometheus /metrics into server_metrics.csv (0: no scraping)",
    )
    # the master fetches these URLs: only its command line names them, as it names the ports it binds
    group.add_argument(
        "--server-metrics-url",
        action="append",
        default=[],
        form=COMMAND_LINE,
        help="Master or local runner: a replica's Prometheus /metrics behind the router --host names, scraped into "
        "server_metrics.csv instead of the target's (repeatable: one per replica; the analysis sums them); ROLE=URL: a P/D "
        "role, prefill, decode or both",
    )
    group.add_argument(
        "--server-metrics-service",
        default="",
        form=COMMAND_LINE,
        help="Master or local runner: a Kubernetes headless Service's /metrics URL (http://NAME.NAMESPACE.svc:8000"
        "/metrics): each pod address its name resolves to at test start is scraped as with --server-metrics-url",
    )
    group.add_argument(
        "--connector-metrics-url",
        action="append",
        default=[],
        form=COMMAND_LINE,
        help="Master or local runner: a KV connector's own Prometheus /metrics (LMCache's internal API server), its "
        "lookups and stores scraped into each server_metrics.csv row with the server's (repeatable: one per "
        "replica, in the order of --server-metrics-url); not needed when the connector's metrics are in vLLM's",
    )
    group.add_argument(
        "--gpu-metrics-url",
        action="append",
        default=[],
        form=COMMAND_LINE,
        help="Master or local runner: a GPU exporter's Prometheus /metrics (NVIDIA's DCGM exporter, AMD's "
        "device-metrics-exporter) to scrape into gpu_metrics.csv with the server's (repeatable: one per host)",
    )
    group.add_argument(
        "--metrics-port",
        type=int,
        default=0,
        form=COMMAND_LINE,
        help="Master or local runner: serve the load generator's own Prometheus series at /metrics on this port "
        "(on --web-host's interface, no login; the web UI serves them at /metrics too) (0: not on a port of its own)",
    )
    group.add_argument(
        "--otlp-port",
        type=int,
        default=0,
        form=COMMAND_LINE,
        help="Master or local runner: receive the server's OpenTelemetry request spans over OTLP/HTTP (protobuf, "
        "POST /v1/traces) on this port into server_spans.csv, joined to the rows by trace id; start vLLM with "
        "--otlp-traces-endpoint http://THIS_HOST:PORT/v1/traces and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf "
        "(0: no receiver)",
    )
