"""``python -m simulator``: serve a simulated vLLM OpenAI-compatible server on 127.0.0.1, from a profile and
``vllm serve``'s engine flags (docs/concepts/simulator.md, section 2)."""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import signal
import socket
import sys
from collections.abc import Callable

import uvloop
from aiohttp import web

from vllm_stress.core import descriptors

from .api.devroutes import DEV_MODE_VARIABLE
from .api.protocol import LINE_ENDINGS, Reasoning
from .api.server import Simulator
from .engine import leak, lora, residency
from .engine.priority import POLICIES
from .engine.specdecode import SPEC_FLAGS
from .engine.specdecode import add_arguments as add_spec_arguments
from .model.profiles import DEFAULT_PROFILE, FIELD_TYPES, Profile, load_profile, parse_assignments, profile_names
from .pd import disagg

READY_PREFIX = "vllm-stress simulator ready:"
VLLM_FLAGS = (
    "served_model_name",
    "max_model_len",
    "max_num_seqs",
    "max_num_batched_tokens",
    "gpu_memory_utilization",
    "block_size",
    "num_gpu_blocks_override",
    "enable_prefix_caching",
    "kv_offloading_size",
    "stream_interval",
    "scheduling_policy",
)
ANSWER_FLAGS = ("answer_accuracy", "answer_flip_rate", "answer_fault_batch")


PROG = "python -m simulator"  # the installed command names it "vllm-stress simulate"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Simulated vLLM server: vLLM's HTTP API and metrics over a V1-scheduler engine model.",
        epilog=f"profiles: {', '.join(profile_names())}. --set fields: {', '.join(FIELD_TYPES)}.",
    )
    parser.add_argument("--profile", default=DEFAULT_PROFILE, help="profile name or path to a .toml (%(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (%(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port; 0 picks a free one (%(default)s)")
    parser.add_argument("--served-model-name", help="model name clients must use (default: the profile's)")
    parser.add_argument("--max-model-len", type=int, help="context length: prompt + output tokens")
    parser.add_argument("--max-num-seqs", type=int, help="most sequences running at once")
    parser.add_argument("--max-num-batched-tokens", type=int, help="token budget of one engine step")
    parser.add_argument("--gpu-memory-utilization", type=float, help="share of device memory for weights + KV cache")
    parser.add_argument("--block-size", type=int, help="tokens per KV block")
    parser.add_argument("--num-gpu-blocks-override", type=int, help="KV block count instead of the memory model")
    parser.add_argument(
        "--enable-prompt-tokens-details",
        action="store_true",
        help="Usage says how many prompt tokens came from the prefix cache (prompt_tokens_details), "
        "as vllm serve does with this flag",
    )
    parser.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        help="automatic prefix caching (default: the profile's; on, as in vLLM V1)",
    )
    parser.add_argument(
        "--kv-offloading-size",
        type=float,
        metavar="GIB",
        help="a CPU tier of the KV cache: GiB of host memory its offloaded blocks may take (vLLM's native "
        "OffloadingConnector; each computed block is stored there, a prefix the GPU evicted is loaded back at the "
        "profile's kv_offload_bandwidth instead of recomputed; default: none)",
    )
    parser.add_argument("--stream-interval", type=int, help="tokens per streamed chunk (minimum)")
    parser.add_argument(
        "--scheduling-policy",
        choices=POLICIES,
        help="waiting order and preemption victim: fcfs, or by the request's priority field (default: fcfs)",
    )
    parser.add_argument(
        "--api-key",
        default=os.environ.get("VLLM_API_KEY"),
        help="require 'Authorization: Bearer KEY' on /v1 paths (default: $VLLM_API_KEY, as vLLM; the "
        "variable keeps the key out of process listings)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of step jitter and unseeded requests (%(default)s)")
    parser.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="simulated seconds per wall-clock second; >1 = faster simulated GPU (%(default)s)",
    )
    parser.add_argument(
        "--event-loop", choices=("asyncio", "uvloop"), default="asyncio", help="event loop implementation (%(default)s)"
    )
    parser.add_argument(
        "--answer-accuracy",
        type=float,
        help="share of benchmark questions answered right when run alone (answers.py; default 0.8)",
    )
    parser.add_argument(
        "--answer-flip-rate",
        type=float,
        help="chance per other sequence in flight that an answer flips (default 0.0005)",
    )
    parser.add_argument(
        "--answer-fault-batch",
        type=int,
        metavar="N",
        help="a fault: every answer given while more than N sequences are in flight is a different one (default 0: off)",
    )
    parser.add_argument(
        "--request-log",
        metavar="PATH",
        help="append one JSON line of server-side timing per request that has an X-Request-Id header "
        "(vllm_stress/simulator/api/requestlog.py)",
    )
    parser.add_argument(
        "--otlp-traces-endpoint",
        metavar="URL",
        help="export an OpenTelemetry span per finished request that carried a traceparent header, as vLLM's "
        "--otlp-traces-endpoint does (same span name and attributes), over OTLP/HTTP protobuf to URL "
        "(e.g. http://127.0.0.1:4318/v1/traces)",
    )
    parser.add_argument(
        "--reasoning-tokens",
        type=int,
        default=0,
        metavar="R",
        help="serve a reasoning model: the first R output tokens of each chat choice are streamed as reasoning, "
        "and usage counts them in completion_tokens_details (%(default)s: none)",
    )
    parser.add_argument(
        "--reasoning-field",
        choices=("reasoning", "reasoning_content"),
        default="reasoning",
        help="the delta field of the reasoning: vLLM's current name or its older one (%(default)s)",
    )
    parser.add_argument(
        "--sse-line-ending",
        choices=tuple(LINE_ENDINGS),
        default="lf",
        help="how streamed SSE lines end: LF as vLLM, or CRLF or CR as the SSE standard also allows (and some "
        "gateways send) (%(default)s)",
    )
    parser.add_argument(
        "--accept-cost-ms",
        type=float,
        default=0.0,
        help="milliseconds the server's event loop spends on each connection it accepts, serving nothing else "
        "meanwhile (a TLS handshake's CPU): the HTTP layer bounds the connections per second (%(default)s: none)",
    )
    parser.add_argument(
        "--profiler-dir",
        help="answer POST /start_profile and /stop_profile as vllm serve does with a profiler configured (vLLM "
        "0.32's --profiler-config), writing a small JSON trace per profile into this folder (default: no profiler, "
        "the routes are not found)",
    )
    parser.add_argument(
        "--dev-mode",
        action="store_true",
        default=os.environ.get(DEV_MODE_VARIABLE, "") not in ("", "0"),
        help=f"serve vLLM's development route POST /reset_prefix_cache, as vllm serve does with {DEV_MODE_VARIABLE}=1 "
        "(default: that variable; without it the route is not found)",
    )
    lora.add_arguments(parser)
    add_spec_arguments(parser)
    leak.add_arguments(parser)
    residency.add_arguments(parser)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override one profile field, e.g. --set mfu=0.4 --set t_fixed=0.01 (repeatable)",
    )
    disagg.add_arguments(parser)
    return parser


def profile_from_args(args: argparse.Namespace) -> Profile:
    overrides = parse_assignments(args.set)
    overrides.update(
        {
            flag: getattr(args, flag)
            for flag in VLLM_FLAGS + ANSWER_FLAGS + SPEC_FLAGS
            if getattr(args, flag) is not None
        }
    )
    return load_profile(args.profile, overrides)


def reasoning_from_args(args: argparse.Namespace) -> Reasoning | None:
    """The reasoning model ``--reasoning-tokens`` asks for, or None; ValueError for a negative count."""
    if args.reasoning_tokens < 0:
        raise ValueError(f"--reasoning-tokens must not be negative, got {args.reasoning_tokens}")
    return Reasoning(args.reasoning_tokens, args.reasoning_field.encode()) if args.reasoning_tokens else None


def accept_all(
    loop: asyncio.AbstractEventLoop,
    listener: socket.socket,
    factory: Callable[[], asyncio.BaseProtocol],
    pending: set[asyncio.Task[object]],
    accepted: Callable[[socket.socket], socket.socket] | None = None,
) -> None:
    """Accept every connection waiting on ``listener`` and hand each to aiohttp's protocol ``factory``.

    uvloop accepts one connection per event-loop iteration (libuv stops the listening watcher until the callback's
    deferred accept ran): with a thousand busy streams an iteration takes ~12 ms, so a burst of new connections
    waits in the accept queue at ~80 per second and a scraper behind it waits for seconds. asyncio's server accepts
    up to its backlog per wake-up. This reader drains the queue on either loop. ``accepted`` may wrap each
    connection (the simulator's count and accept cost, the request log's arrival stamps: api/connections.py).
    """
    while True:
        try:
            connection, _address = listener.accept()
        except (BlockingIOError, InterruptedError):
            return
        except OSError as error:  # e.g. out of file descriptors: the rest wait for the next wake-up
            print(f"simulator: accept failed: {error}", file=sys.stderr, flush=True)
            return
        if accepted:
            connection = accepted(connection)
        connection.setblocking(False)
        task = loop.create_task(loop.connect_accepted_socket(factory, connection))
        pending.add(task)
        task.add_done_callback(pending.discard)


async def serve(simulator: Simulator, host: str, port: int) -> None:
    runner = web.AppRunner(simulator.app(), handler_cancellation=True, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    if runner.server is None:  # aiohttp sets it in setup()
        raise RuntimeError("aiohttp's AppRunner has no server after setup()")
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    listener = socket.create_server((host, port), family=family, backlog=4096)
    listener.setblocking(False)
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[object]] = set()
    if simulator.request_log:
        simulator.request_log.listening(listener)
    accept = simulator.connections.accept
    loop.add_reader(listener.fileno(), accept_all, loop, listener, runner.server, pending, accept)
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    bound_port = listener.getsockname()[1]
    print(
        f"{READY_PREFIX} http://{host}:{bound_port} model={simulator.model} profile={simulator.profile.name}",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        loop.remove_reader(listener.fileno())
        listener.close()
        await runner.cleanup()


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        profile = profile_from_args(args)
        make = functools.partial(  # what every instance of a P/D fleet shares too
            Simulator,
            api_key=args.api_key,
            time_scale=args.time_scale,
            prompt_details=args.enable_prompt_tokens_details,
            reasoning=reasoning_from_args(args),
            sse_line_ending=LINE_ENDINGS[args.sse_line_ending],
            lora=lora.config_from_args(args),
            dev_mode=args.dev_mode,
            kv_cache_metrics=residency.sample_from_args(args),
        )
        if args.pd:
            fleet = disagg.build_fleet(args, disagg.role_profiles(args, profile), make)
        else:
            simulator = make(
                profile,
                seed=args.seed,
                request_log=args.request_log,
                accept_cost_s=args.accept_cost_ms / 1000,
                otlp_traces_endpoint=args.otlp_traces_endpoint,
                leak=leak.leak_from_args(args),
                profiler_dir=args.profiler_dir,
            )
    except ValueError as error:
        print(f"simulator: {error}", file=sys.stderr)
        return 2
    descriptors.raise_limit()  # a socket per stream: the soft RLIMIT_NOFILE up to the hard one
    loop_factory = uvloop.new_event_loop if args.event_loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=loop_factory) as runner:
        if args.pd:
            runner.run(disagg.serve_fleet(fleet, args.host, args.port, args.api_key, READY_PREFIX))
        else:
            runner.run(serve(simulator, args.host, args.port))
    return 0
