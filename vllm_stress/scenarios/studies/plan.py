"""``python -m scenarios plan``: how many Locust worker processes and machines a load needs, from the client's
measured CPU per streamed token, or that figure checked against a run; with ``--target-rate``, how many server
replicas a rate needs (``replicas.py``) (docs/concepts/scenarios.md, section 6)."""

from __future__ import annotations

import argparse
import math
import os
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.levels import level_windows
from vllm_stress.analysis.measures import records, tokens_in_windows
from vllm_stress.core.metrics import health_samples
from vllm_stress.core.sizing import (
    CLIENT_CPU_US_PER_TOKEN,
    MEASURED,
    TIMING_CPU_PERCENT,
    cores_for,
    machine_processes,
    stream_lines,
    worker_processes,
)
from vllm_stress.scenarios.studies import replicas


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--users", type=int, default=0, help="Concurrent streams")
    parser.add_argument(
        "--tokens-per-s-per-stream",
        type=float,
        default=0.0,
        help="Output tokens per second of one stream (the server's decode speed at that load)",
    )
    parser.add_argument(
        "--output-tokens",
        type=int,
        default=0,
        help="Output tokens of one answer: the plan then gives the master's CPU for the request rows",
    )
    parser.add_argument(
        "--cores-per-machine",
        type=int,
        default=os.cpu_count() or 1,
        help="Cores of each worker machine (default: this machine's)",
    )
    parser.add_argument(
        "--from-run",
        default="",
        metavar="DIR",
        help="A run folder: compare its workers' measured CPU with the plan's per level",
    )
    parser.add_argument(
        "--target-rate",
        default="",
        metavar="R",
        help="Plan server replicas instead: the rate to serve, in req/s or tok/s (output tokens), e.g. 300req/s",
    )
    parser.add_argument(
        "--from-report",
        default="",
        metavar="DIR",
        help="With --target-rate: a report folder (its level with the most users within the SLOs it was analysed "
        "with, analyse --slo or run --slo; else its peak) or an SLO search folder (its answer), whose rate one "
        "replica sustains",
    )
    parser.add_argument(
        "--label", default="", help="With --from-report: the report's config to plan from (when it holds several)"
    )
    parser.add_argument(
        "--headroom",
        type=float,
        default=0.0,
        help="With --target-rate: spare capacity on top of the target, e.g. 0.2 for 20 %% (default: %(default)s)",
    )
    parser.add_argument(
        "--gpus", type=int, default=0, help="With --target-rate: GPUs per replica (default: the report's --gpus)"
    )
    parser.add_argument(
        "--gpu-hour-price",
        type=float,
        default=0.0,
        metavar="USD",
        help="With --target-rate: $ per GPU-hour (default: the report's --gpu-hour-price)",
    )


def plan(users: int, tokens_per_s_per_stream: float, cores_per_machine: int, output_tokens: int = 0) -> str:
    tokens_per_s = users * tokens_per_s_per_stream
    cores = cores_for(tokens_per_s)
    processes = worker_processes(tokens_per_s, users)
    simulator = MEASURED["cpu_per_token_simulator"].value
    return "\n".join(
        [
            f"{users:,} streams x {tokens_per_s_per_stream:g} tokens/s = {tokens_per_s:,.0f} tokens/s to time",
            f"client CPU: {CLIENT_CPU_US_PER_TOKEN} us per token against a server writing each token on its own, as "
            f"vLLM does (benchmarks/scale.md) = {cores:.2f} cores ({cores_for(tokens_per_s, simulator):.2f} against the "
            f"simulator, {simulator} us per token)",
            f"worker processes: {processes} (each at most {TIMING_CPU_PERCENT:.0f} % of a core for accurate timing, "
            f"{MEASURED['streams_per_worker'].value:,.0f} streams as measured: "
            f"{100 * cores / processes:.0f} % each)",
            *stream_lines(users, processes, tokens_per_s / output_tokens if output_tokens > 0 else 0.0),
            *layout_lines(processes, cores_per_machine),
        ]
    )


def layout_lines(processes: int, cores_per_machine: int) -> list[str]:
    """Where the processes run: on the master's machine (``run --workers``) when they leave it a core, or on worker
    machines (``vllm-stress worker --processes``, one process per core) whose processes the master expects in all."""
    per_machine = machine_processes(processes, cores_per_machine)
    fits = "" if processes < cores_per_machine else " (leaves the master no core of its own: use worker machines)"
    return [
        f"on the master's machine: vllm-stress run ... --workers {processes}{fits}",
        f"or worker machines: {len(per_machine)} with {cores_per_machine} cores",
        *(
            f"  on {count} of them: vllm-stress worker --master-host ADDR --processes {each}"
            for each, count in sorted(Counter(per_machine).items(), reverse=True)
        ),
        f"  the master: vllm-stress run ... --master-bind-host ADDR --expect-workers {sum(per_machine)}",
    ]


def check_run(folder: Path) -> str:
    """Per held level of a run: tokens/s streamed in its window, the workers' CPU, the CPU per token, the plan for it.
    The windows, the tokens in them and the health samples over them are the report's (analysis/levels.py and
    measures.py, the rules of vllm_stress.core.metrics), so the two agree on the same run."""
    run = load_run(folder)
    windows, _ = level_windows(run)
    windows = windows[windows["held"]]
    tokens, _ = tokens_in_windows(run.requests, windows)
    health = run.tables.get("client_health")
    samples = [] if health is None else records(health.sort_values("time"))
    lines = ["users | tokens/s | workers | worker CPU (sum, busiest) | us per token | planned processes"]
    for users, start, end in zip(windows["users"], windows["start"], windows["end"], strict=True):
        per_worker = worker_cpu(samples, start, end)
        if not per_worker or not tokens[users] > 0:
            continue
        tokens_per_s = tokens[users] / (end - start)
        total = sum(per_worker.values())
        lines.append(
            f"{users} | {tokens_per_s:,.0f} | {len(per_worker)} | {total:.0f} %, {max(per_worker.values()):.0f} %"
            f" | {total / 100 / tokens_per_s * 1e6:.1f} | {worker_processes(tokens_per_s)}"
        )
    return "\n".join(lines)


def worker_cpu(samples: list[dict[str, Any]], start: float, end: float) -> dict[str, float]:
    """Each worker's mean CPU % over its client_health.csv samples in ``[start, end)``
    (vllm_stress.core.metrics.health_samples: those whose span overlaps it); the master's own apart."""
    cpu: defaultdict[str, list[float]] = defaultdict(list)
    for sample in health_samples(samples, start, end):
        if sample["worker"] not in ("master", "local") and not math.isnan(sample["cpu_percent"]):
            cpu[sample["worker"]].append(sample["cpu_percent"])
    return {worker: sum(values) / len(values) for worker, values in cpu.items()}


def run_from_args(args: argparse.Namespace) -> str:
    if args.target_rate or args.from_report:
        return replicas_from_args(args)
    if args.from_run:
        return check_run(Path(args.from_run))
    if args.users <= 0 or args.tokens_per_s_per_stream <= 0 or args.cores_per_machine <= 0:
        raise ValueError("plan needs --users N and --tokens-per-s-per-stream R (both positive), or --from-run DIR")
    return plan(args.users, args.tokens_per_s_per_stream, args.cores_per_machine, args.output_tokens)


def replicas_from_args(args: argparse.Namespace) -> str:
    """The replica plan of --target-rate R --from-report DIR; ValueError for anything it cannot use."""
    if not (args.target_rate and args.from_report) or args.users or args.from_run:
        raise ValueError("plan --target-rate R needs --from-report DIR, and neither --users nor --from-run")
    if args.headroom < 0 or args.gpus < 0 or args.gpu_hour_price < 0:
        raise ValueError("--headroom, --gpus and --gpu-hour-price must not be negative")
    target, unit = replicas.parse_rate(args.target_rate)
    source = replicas.read_source(Path(args.from_report), args.label)
    return replicas.replica_plan(source, target, unit, args.headroom, args.gpus, args.gpu_hour_price)
