"""Shared fixtures: the embedded simulator and Locust, as real processes on 127.0.0.1."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def simulator():
    """Start simulators with the given arguments; all are stopped after the test."""
    from vllm_stress.simulator.process import start_simulator

    started = []

    def start(*args: str):
        sim = start_simulator(*args)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def run_locust(*args: str, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the locust CLI from the repository root and return the finished process (output captured)."""
    cmd = [sys.executable, "-m", "locust", *args]
    environment = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=environment)


def two_workers() -> list[str]:
    """Locust arguments for a master with two forked workers (--processes 2) on a free loopback port.

    With --processes the workers dial --master-port, so it must be set with --master-bind-port.
    """
    from vllm_stress.scenarios.runner import free_port

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


def read_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def scrape(url: str) -> dict[str, float]:
    """The server's /metrics as {sample name with labels: value} (prometheus_client's parser)."""
    import requests
    from prometheus_client.parser import text_string_to_metric_families

    samples = {}
    for family in text_string_to_metric_families(requests.get(url + "/metrics", timeout=10).text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k not in ("engine", "model_name"))
            samples[f"{sample.name}{{{labels}}}"] = sample.value
    return samples


def server_completed(url: str) -> int:
    """Requests the server finished, whatever their finish reason (vLLM's request_success_total)."""
    return int(sum(v for k, v in scrape(url).items() if k.startswith("vllm:request_success_total{")))


@pytest.fixture
def network():
    """A bridge in its own network namespace for hosts (``network.add_host(name)``); skips without namespaces.
    Every process started in the hosts is stopped and every namespace deleted after the test, pass or fail."""
    from tests.netns import Network, netns_unavailable

    if reason := netns_unavailable():
        pytest.skip(reason)
    net = Network()
    try:
        yield net
    finally:
        net.close()
