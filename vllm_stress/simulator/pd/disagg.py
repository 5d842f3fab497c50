"""Disaggregated prefill/decode in the simulator (``vllm-stress simulate --pd PxD``): P prefill and D decode instances,
each the engine model behind vLLM's HTTP API with its own settings, a modelled KV link into each decode instance, and
the proxy in front (pdproxy.py). A prefill instance answers a request carrying ``kv_transfer_params`` with
``do_remote_decode`` after its one token, returning the parameters a decode instance reads the KV with; a decode
instance given ``do_remote_prefill`` pulls the prompt's KV over its link (KV bytes / bandwidth, one transfer at a
time, plus a latency) and then schedules the request with all but the prompt's last token computed, as vLLM's
scheduler takes a KV connector's tokens. Decode instances export NixlConnector's series (vLLM's
``vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py``, ``NixlPromMetrics``)."""

from __future__ import annotations

import argparse
import asyncio
import itertools
import re
import signal
import socket
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, Metric

from ..api.metrics import NamedHistogram
from ..api.server import Simulator
from ..engine.steptime import kv_bytes_per_token_per_rank
from ..model.profiles import Profile, parse_assignments

LAYOUT = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")
ROLES = ("prefill", "decode")
PD_READY_PREFIX = "vllm-stress simulator P/D instances:"
XFER_TIME_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]  # NixlPromMetrics'
BYTES_BUCKETS = [2 ** (10 + i) for i in range(1, 25, 2)]  # NixlPromMetrics': 2 KiB to 8 GiB


def parse_layout(text: str) -> tuple[int, int]:
    """'2x2' -> (2 prefill, 2 decode instances); ValueError otherwise."""
    match = LAYOUT.match(text)
    if not match or not int(match[1]) or not int(match[2]):
        raise ValueError(f"--pd: {text!r} is not PREFILLxDECODE with at least one of each (e.g. 2x2)")
    return int(match[1]), int(match[2])


def kv_bytes_per_token(profile: Profile) -> int:
    """KV bytes one prompt token moves from prefill to decode: every rank's share (each rank sends its own)."""
    return kv_bytes_per_token_per_rank(profile) * profile.tensor_parallel_size


class KvLink:
    """One decode instance's KV ingress: transfers served one at a time at ``bandwidth`` bytes/s, each done
    ``latency`` seconds after its last byte left (engine seconds)."""

    def __init__(self, bandwidth: float, latency: float) -> None:
        if not bandwidth > 0 or latency < 0:
            raise ValueError("the KV link needs a positive bandwidth and a latency of at least 0")
        self.bandwidth = bandwidth
        self.latency = latency
        self.free_at = 0.0

    def transfer(self, posted: float, num_bytes: int) -> float:
        """When a transfer of ``num_bytes`` posted at ``posted`` is done."""
        self.free_at = max(self.free_at, posted) + num_bytes / self.bandwidth
        return self.free_at + self.latency


class NixlMetrics:
    """NixlConnector's Prometheus series of one decode instance (its transfers' duration and bytes; failures, which
    the model never has, stay 0)."""

    def __init__(self, model_name: str) -> None:
        self.labels = [model_name, "0"]
        self.xfer_time = NamedHistogram(
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for NIXL KV Cache transfers.",
            XFER_TIME_BUCKETS,
        )
        self.bytes = NamedHistogram(
            "vllm:nixl_bytes_transferred",
            "Histogram of bytes transferred per NIXL KV Cache transfers.",
            [float(bound) for bound in BYTES_BUCKETS],
        )

    def collect(self) -> Iterator[Metric]:
        yield self.xfer_time.family(self.labels)
        yield self.bytes.family(self.labels)
        for name, documentation in (
            ("vllm:nixl_num_failed_transfers", "Number of failed NIXL KV Cache transfers."),
            ("vllm:nixl_num_failed_notifications", "Number of failed NIXL KV Cache notifications."),
        ):
            counter = CounterMetricFamily(name, documentation, labels=["model_name", "engine"])
            counter.add_metric(self.labels, 0.0)
            yield counter


class KvConnector:
    """One instance's side of the KV transfer: a prefill instance's parameters for decode, a decode instance's pull."""

    def __init__(self, simulator: Simulator, role: str, link: KvLink | None = None) -> None:
        self.simulator = simulator
        self.role = role
        self.link = link
        self.engine_id = uuid.uuid4().hex
        self.bytes_per_token = kv_bytes_per_token(simulator.profile)
        self.metrics = NixlMetrics(simulator.model) if link else None
        if self.metrics:
            simulator.registry.register(self.metrics)

    def produced(self, params: object, prompt_tokens: int) -> dict | None:
        """A prefill instance's answer to ``do_remote_decode``: what the decode instance reads the KV with."""
        if not (isinstance(params, dict) and params.get("do_remote_decode")):
            return None
        block_size = self.simulator.profile.block_size
        return {
            "do_remote_prefill": True,
            "do_remote_decode": False,
            "remote_block_ids": list(range(-(-prompt_tokens // block_size))),
            "remote_engine_id": self.engine_id,
            "remote_host": "127.0.0.1",
            "remote_port": 0,
            "tp_size": self.simulator.profile.tensor_parallel_size,
        }

    async def receive(self, params: object, prompt_tokens: int) -> tuple[int, float] | None:
        """A decode instance's pull of the prompt's KV (``do_remote_prefill``): waits for the transfer and returns
        (tokens computed elsewhere, engine time the request arrived), or None when there is nothing to pull."""
        if self.link is None or not (isinstance(params, dict) and params.get("do_remote_prefill")):
            return None
        driver = self.simulator.driver
        posted = driver.engine_now()
        num_bytes = prompt_tokens * self.bytes_per_token
        done = self.link.transfer(posted, num_bytes)
        await asyncio.sleep(max(0.0, done - driver.engine_now()) / driver.time_scale)
        if self.metrics:
            self.metrics.xfer_time.observe(done - posted)  # engine seconds, as the engine's own histograms
            self.metrics.bytes.observe(num_bytes)
        return max(0, prompt_tokens - 1), posted  # vLLM recomputes the last prompt token to sample the first


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The P/D flags of ``vllm-stress simulate``."""
    parser.add_argument(
        "--pd",
        metavar="PxD",
        help="P prefill and D decode instances behind a proxy on --port, e.g. 2x2 (docs/guides/disaggregated.md)",
    )
    parser.add_argument("--kv-transfer-gbps", type=float, help="with --pd: KV link per decode instance, Gbit/s")
    parser.add_argument("--kv-transfer-latency-ms", type=float, help="with --pd: KV transfer latency")
    for role in ROLES:
        parser.add_argument(
            f"--{role}-set",
            action="append",
            default=[],
            metavar="FIELD=VALUE",
            help=f"with --pd: a {role} instances' profile field",
        )


@dataclass
class Fleet:
    """The instances of a P/D simulator by role, each with its listening socket."""

    prefill: list[tuple[Simulator, socket.socket]]
    decode: list[tuple[Simulator, socket.socket]]


def role_profiles(args: argparse.Namespace, profile: Profile) -> dict[str, Profile]:
    """The profile of each role: ``profile`` with the P/D flags and that role's --ROLE-set fields."""
    link = {}
    if args.kv_transfer_gbps is not None:
        link["kv_transfer_gbps"] = args.kv_transfer_gbps
    if args.kv_transfer_latency_ms is not None:
        link["kv_transfer_latency_s"] = args.kv_transfer_latency_ms / 1000
    return {role: profile.replace(**link, **parse_assignments(getattr(args, f"{role}_set"))) for role in ROLES}


def build_fleet(args: argparse.Namespace, profiles: dict[str, Profile], make: Callable[..., Simulator]) -> Fleet:
    """The instances ``--pd`` asks for on --host, connected by their roles: the prefill instances on the ports after
    --port, then the decode instances (each on a free port with --port 0)."""
    counts = dict(zip(ROLES, parse_layout(args.pd), strict=True))
    if args.request_log or args.otlp_traces_endpoint:  # every instance would see each request
        raise ValueError("--pd serves no --request-log or --otlp-traces-endpoint (one request, two instances)")
    if args.accept_cost_ms:  # its proxy and instances accept through aiohttp's own sites, not the counting hook
        raise ValueError("--pd serves no --accept-cost-ms (the fleet's proxy accepts its connections)")
    if args.profiler_dir:  # the proxy has no engine to profile
        raise ValueError("--pd serves no --profiler-dir (its proxy has no engine)")
    ports = itertools.count(args.port + 1) if args.port else itertools.repeat(0)
    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    fleet: dict[str, list[tuple[Simulator, socket.socket]]] = {role: [] for role in ROLES}
    for role in ROLES:
        profile = profiles[role]
        for index in range(counts[role]):
            simulator = make(profile, seed=args.seed + index)
            link = None
            if role == "decode":
                link = KvLink(profile.kv_transfer_gbps * 1e9 / 8, profile.kv_transfer_latency_s)
            simulator.connector = KvConnector(simulator, role, link)
            fleet[role].append((simulator, socket.create_server((args.host, next(ports)), family=family, backlog=4096)))
    return Fleet(fleet["prefill"], fleet["decode"])


def url_of(listener: socket.socket) -> str:
    host, port = listener.getsockname()[:2]
    return f"http://{f'[{host}]' if ':' in host else host}:{port}"


async def serve_fleet(fleet: Fleet, host: str, port: int, api_key: str | None, ready_prefix: str) -> None:
    """Serve every instance and the proxy on ``port`` until SIGINT or SIGTERM."""
    from .pdproxy import Proxy

    runners = []
    for simulator, listener in [*fleet.prefill, *fleet.decode]:
        runner = web.AppRunner(simulator.app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
        await runner.setup()
        await web.SockSite(runner, listener).start()
        runners.append(runner)
    prefill = [url_of(listener) for _, listener in fleet.prefill]
    decode = [url_of(listener) for _, listener in fleet.decode]
    proxy = Proxy(prefill, decode, api_key)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=4096)
    proxy_runner = web.AppRunner(proxy.app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
    await proxy_runner.setup()
    await web.SockSite(proxy_runner, listener).start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    print(f"{PD_READY_PREFIX} prefill={','.join(prefill)} decode={','.join(decode)}", flush=True)
    simulator = fleet.decode[0][0]
    print(f"{ready_prefix} {url_of(listener)} model={simulator.model} profile={simulator.profile.name}", flush=True)
    try:
        await stop.wait()
    finally:
        for runner in [proxy_runner, *reversed(runners)]:
            await runner.cleanup()
