"""The server a scenario measures: a given URL, a server command started and stopped around it, or the embedded
simulator; its readiness and the bearer header it expects."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit

import requests

from vllm_stress.client import options
from vllm_stress.client.serverinfo import launch_option
from vllm_stress.core import children, served
from vllm_stress.core.otlp import TRACES_PATH
from vllm_stress.scenarios.run.config import ROOT
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.simulator.process import start_simulator, stop_process

log = logging.getLogger("scenarios")

# A server command gets longer to stop: vLLM frees its GPUs, and docker stop waits for that.
SERVER_STOP_GRACE_S = 120
SERVER_READY_TIMEOUT_S = 900.0
LOOPBACK = ("127.0.0.1", "localhost", "::1")
# vLLM's span exporter speaks OTLP/gRPC unless told otherwise, and sends a batch every 5 s: the receiver is OTLP/HTTP
SPAN_EXPORT_ENV = {
    "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
    "OTEL_BSP_SCHEDULE_DELAY": "500",
}  # a large model's first start downloads and compiles; --server-ready-timeout


@contextmanager
def server(
    target: str | None,
    simulator_args: list[str],
    server_cmd: str = "",
    headers: dict[str, str] | None = None,
    ready_timeout: float = SERVER_READY_TIMEOUT_S,
) -> Iterator[str]:
    """Yield the base URL of the server to test: ``target``, a started ``server_cmd``, or a started simulator."""
    if target and not server_cmd:
        yield target
        return
    if server_cmd:
        if not target:
            raise ScenarioError("--server-cmd needs --target: the URL its server will answer at")
        with started_command(target, server_cmd, simulator_args, headers or {}, ready_timeout):
            yield target
        return
    with start_simulator(*simulator_args) as sim:
        log.info("simulator %s serving %s at %s", " ".join(simulator_args), sim.model, sim.url)
        yield sim.url


@contextmanager
def started_command(
    target: str, server_cmd: str, server_args: list[str], headers: dict[str, str], ready_timeout: float
) -> Iterator[None]:
    """Run ``server_cmd`` with ``server_args`` until its server lists a model at ``target``; stop it at the end and
    wait until nothing answers there any more."""
    if answers(target):
        raise ScenarioError(
            f"something already answers at {target}: stop it first (docker ps), so that the "
            "server command's server is the one measured"
        )
    proc = children.popen(shlex.split(server_cmd) + server_args, cwd=ROOT, env=os.environ | SPAN_EXPORT_ENV)
    try:
        wait_for_models(target, proc, ready_timeout, headers)
        yield
    finally:
        stop_process(proc, SERVER_STOP_GRACE_S)
        wait_closed(target, SERVER_STOP_GRACE_S)


def span_args(keys: dict[str, str], locust_args: list[str], target: str | None) -> list[str]:
    """With --otlp-port (a Locust argument or the config's key) and a server the runner starts (the simulator, or a
    --server-cmd server on this machine): the flag that has it export its request spans to the master's receiver."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    parser.add_argument("--otlp-port", type=int, default=int(keys.get("otlp-port") or 0))
    port = parser.parse_known_args(locust_args)[0].otlp_port
    if not port or (target and urlsplit(target).hostname not in LOOPBACK):
        return []
    return ["--otlp-traces-endpoint", f"http://127.0.0.1:{port}{TRACES_PATH}"]


def launch_args(target: str | None, server_args: list[str], server_cmd: str = "") -> list[str]:
    """The Locust argument that records in run.json how ``server()`` started the server (none for a --target alone)."""
    if server_cmd:
        return [launch_option("server-cmd", shlex.split(server_cmd) + server_args)]
    return [] if target else [launch_option("simulator", ["python", "-m", "vllm_stress.simulator", *server_args])]


def answers(url: str) -> bool:
    """Something accepts TCP connections at the URL's host and port."""
    parts = urlsplit(url)
    try:
        with socket.create_connection((parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)), 2):
            return True
    except OSError:
        return False


def wait_closed(url: str, timeout: float) -> None:
    """Wait until nothing answers at ``url`` (the stopped server has let go of its port)."""
    deadline = time.monotonic() + timeout
    while answers(url):
        if time.monotonic() > deadline:
            raise ScenarioError(
                f"{url} still answers {timeout:.0f} s after the server command ended: its server "
                "(a container? docker ps) must be stopped before another cell can be measured"
            )
        time.sleep(1)


def api_headers(locust_args: list[str]) -> dict[str, str]:
    """The bearer header the user classes will send (OPENAI_API_KEY or --api-key-file among ``locust_args``)."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--api-key-file", default="")
    known, _ = parser.parse_known_args(locust_args)
    try:
        key = options.api_key(argparse.Namespace(api_key_file=known.api_key_file, api_key=""))
    except OSError as e:
        raise ScenarioError(f"--api-key-file: {e}") from None
    return {"Authorization": f"Bearer {key}"} if key else {}


def wait_for_models(url: str, proc: subprocess.Popen, timeout: float, headers: dict[str, str]) -> None:
    """Wait until the server at ``url`` lists a model (what a real vLLM does once it is ready)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ScenarioError(f"the server command exited with code {proc.returncode} before it was ready")
        try:
            if served.models(url, headers, timeout=5):
                return
        except requests.HTTPError as e:
            if e.response is not None and e.response.status_code == 401:
                raise ScenarioError(
                    f"{url} refuses {'the' if headers else 'a request without an'} API key (HTTP "
                    "401): give the server's key as OPENAI_API_KEY or --locust-arg=--api-key-file=FILE"
                ) from None
        except (requests.RequestException, ValueError):
            pass
        time.sleep(2)
    raise ScenarioError(f"the server at {url} was not ready within {timeout:.0f} s (--server-ready-timeout)")
