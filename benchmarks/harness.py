"""What the benchmarks and the tests both use to drive a run and read it from outside: the rows of a run's
``requests.csv``, a server's ``/metrics`` (prometheus_client's parser), Locust's command line for a headless chat run
and its arguments for two local workers."""

from __future__ import annotations

import sys

import requests
from prometheus_client.parser import text_string_to_metric_families

from vllm_stress.core.csvrows import read_rows as read_rows  # the tests' and benchmarks' rows
from vllm_stress.scenarios.run.runner import free_port


def metric_samples(url: str) -> dict[tuple[str, frozenset], float]:
    """The server's /metrics as {(sample name, frozenset of its labels): value}, ``engine`` and ``model_name`` left
    out of the labels (prometheus_client's parser)."""
    response = requests.get(url + "/metrics", timeout=10)
    response.raise_for_status()
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            labels = {k: v for k, v in sample.labels.items() if k not in ("engine", "model_name")}
            samples[sample.name, frozenset(labels.items())] = sample.value
    return samples


def scrape(url: str) -> dict[str, float]:
    """``metric_samples`` keyed by text: ``vllm:num_requests_running{}``,
    ``vllm:request_success_total{finished_reason=length}`` (labels sorted)."""
    return {
        f"{name}{{{','.join(f'{k}={v}' for k, v in sorted(labels))}}}": value
        for (name, labels), value in metric_samples(url).items()
    }


def two_workers() -> list[str]:
    """Locust arguments for a master with two forked workers (--processes 2) on a free loopback port.

    With --processes the workers dial --master-port, so it must be set with --master-bind-port.
    """
    port = str(free_port())
    return [
        "--processes",
        "2",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        port,
        "--master-port",
        port,
        "--expect-workers-max-wait",
        "30",
    ]


def chat_locust(url: str, output_tokens: int, locustfile: str = "locustfiles/chat.py") -> list[str]:
    """Locust's command line for a headless run of the chat user against ``url`` (32-token prompts, ``output_tokens``
    answers): a master's or a worker's, once its role's arguments follow."""
    return [sys.executable, "-m", "locust", "-f", locustfile, "-H", url, "--input-tokens", "32"] + [
        "--output-tokens",
        str(output_tokens),
        "--headless",
        "--only-summary",
    ]
