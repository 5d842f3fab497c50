"""``python -m scenarios plan``: how many Locust worker processes and machines a load needs, from the client's
measured CPU per streamed token, or that figure checked against a run; with ``--target-rate``, how many server
replicas a rate needs (``replicas.py``) (docs/concepts/scenarios.md, section 6)."""

from __future__ import annotations

import argparse
import csv
import math
import os
from collections import defaultdict
from pathlib import Path

from vllm_stress.core import schema
from vllm_stress.core.sizing import CLIENT_CPU_US_PER_TOKEN, TIMING_CPU_PERCENT, cores_for, worker_processes
from vllm_stress.scenarios import replicas


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--users", type=int, default=0, help="Concurrent streams")
    parser.add_argument(
        "--tokens-per-s-per-stream",
        type=float,
        default=0.0,
        help="Output tokens per second of one stream (the server's decode speed at that load)",
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


def plan(users: int, tokens_per_s_per_stream: float, cores_per_machine: int) -> str:
    tokens_per_s = users * tokens_per_s_per_stream
    cores = cores_for(tokens_per_s)
    processes = worker_processes(tokens_per_s)
    machines = math.ceil(processes / cores_per_machine)
    return "\n".join(
        [
            f"{users:,} streams x {tokens_per_s_per_stream:g} tokens/s = {tokens_per_s:,.0f} tokens/s to time",
            f"client CPU: {CLIENT_CPU_US_PER_TOKEN} us per token (benchmarks/client.md) = {cores:.2f} cores",
            f"worker processes: {processes} (each at most {TIMING_CPU_PERCENT:.0f} % of a core for accurate timing: "
            f"{100 * cores / processes:.0f} % each)",
            f"worker machines: {machines} with {cores_per_machine} cores each (--processes -1), "
            f"--expect-workers {machines * cores_per_machine}",
        ]
    )


def check_run(folder: Path) -> str:
    """Per level of a run: tokens/s streamed in its hold, the workers' CPU, the CPU per token, the plan for it."""
    with open(folder / schema.LEVELS_FILE, newline="") as f:
        holds = {int(row["users"]): (float(row["hold_start"]), float(row["hold_end"])) for row in csv.DictReader(f)}
    tokens: defaultdict[int, float] = defaultdict(float)
    cpu: defaultdict[int, defaultdict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    with open(folder / schema.REQUESTS_FILE, newline="") as f:
        for row in csv.DictReader(f):
            users = int(row["users"])
            if users in holds and holds[users][0] <= float(row["end_time"]) <= holds[users][1]:
                tokens[users] += int(row["chunks"] or 0)
    with open(folder / schema.CLIENT_HEALTH_FILE, newline="") as f:
        for row in csv.DictReader(f):  # a row covers the process's previous few seconds: skip the hold's first
            users = int(row["users"])
            if (
                row["worker"] not in ("master", "local")
                and users in holds
                and holds[users][0] + 3 < float(row["time"]) <= holds[users][1]
            ):
                cpu[users][row["worker"]].append(float(row["cpu_percent"]))
    lines = ["users | tokens/s | workers | worker CPU (sum, busiest) | us per token | planned processes"]
    for users, (start, end) in sorted(holds.items()):
        per_worker = {worker: sum(values) / len(values) for worker, values in cpu[users].items()}
        if not per_worker or not tokens[users]:
            continue
        tokens_per_s = tokens[users] / (end - start)
        total = sum(per_worker.values())
        lines.append(
            f"{users} | {tokens_per_s:,.0f} | {len(per_worker)} | {total:.0f} %, {max(per_worker.values()):.0f} %"
            f" | {total / 100 / tokens_per_s * 1e6:.1f} | {worker_processes(tokens_per_s)}"
        )
    return "\n".join(lines)


def run_from_args(args: argparse.Namespace) -> str:
    if args.target_rate or args.from_report:
        return replicas_from_args(args)
    if args.from_run:
        return check_run(Path(args.from_run))
    if args.users <= 0 or args.tokens_per_s_per_stream <= 0 or args.cores_per_machine <= 0:
        raise ValueError("plan needs --users N and --tokens-per-s-per-stream R (both positive), or --from-run DIR")
    return plan(args.users, args.tokens_per_s_per_stream, args.cores_per_machine)


def replicas_from_args(args: argparse.Namespace) -> str:
    """The replica plan of --target-rate R --from-report DIR; ValueError for anything it cannot use."""
    if not (args.target_rate and args.from_report) or args.users or args.from_run:
        raise ValueError("plan --target-rate R needs --from-report DIR, and neither --users nor --from-run")
    if args.headroom < 0 or args.gpus < 0 or args.gpu_hour_price < 0:
        raise ValueError("--headroom, --gpus and --gpu-hour-price must not be negative")
    target, unit = replicas.parse_rate(args.target_rate)
    source = replicas.read_source(Path(args.from_report), args.label)
    return replicas.replica_plan(source, target, unit, args.headroom, args.gpus, args.gpu_hour_price)
