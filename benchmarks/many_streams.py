"""Many concurrent streams on one machine: a Locust master and its workers against the simulator at a slow token
rate, every request accounted for and the client's first-token times checked against the server's.

    .venv/bin/python -m benchmarks.many_streams [--streams 20000] [--workers 4] [--servers 2] [--step 4] [--seconds 150]
        [--output-tokens 16] [--source-addresses 127.0.0.2,127.0.0.3]

``--servers`` simulator processes (``cpu-tiny``, engine steps of ``--step`` seconds: each stream gets 1/step tokens
per second, no jitter, ``--request-log``): a process holds a socket per stream, and a hard RLIMIT_NOFILE (20,000
here, which only CAP_SYS_RESOURCE raises) bounds the streams one process can hold, so the users spread their
requests over them (``-H`` naming each). The chat user runs on a Locust master with ``--workers`` worker processes
(started on their own, as ``vllm-stress worker`` does: forked ones, ``--processes``, lost their heartbeats at once
with 500 users each here), ``--streams`` users spawned at ``--spawn-rate``, 32-token prompts and ``--output-tokens``
answers, for ``--seconds``. Every second the script reads the simulators' ``vllm:num_requests_running`` (the
streams they hold) and, at their peak, both sides' RSS and descriptors.

Prints: the streams held; the accounting line (rows by outcome, aborted, the servers' own count of the requests
they finished, ``vllm:request_success_total`` over the run, and run.json's figures); the first-token receive error
(the client's first-token time,
``start_time`` + ``ttft_s``, taken from the kernel's receive timestamp, minus the time the server handed that
token's bytes to its socket, from its request log; benchmarks/timing.md); the highest CPU and read-behind p99 of
each process in client_health.csv."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from benchmarks.harness import read_rows, scrape
from benchmarks.stream_cost import RUNNING, fds, rss_mib
from benchmarks.timing_error import describe, errors
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.api.requestlog import read_request_log
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent


def locust_commands(url: str, args: argparse.Namespace, out: Path) -> tuple[list[str], list[str]]:
    """The master's command line and a worker's (separate processes, as ``vllm-stress worker`` starts them)."""
    port = str(free_port())
    common = [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "-H", url, "-L", "WARNING"]
    master = [*common, "--master", "--headless", "--only-summary", "--master-bind-host", "127.0.0.1"]
    master += ["--master-bind-port", port, "--expect-workers", str(args.workers), "-u", str(args.streams)]
    master += ["-r", str(args.spawn_rate), "-t", f"{args.seconds}s", "--input-tokens", "32"]
    master += ["--output-tokens", str(args.output_tokens), "--results-dir", str(out)]
    master += ["--source-addresses", args.source_addresses] if args.source_addresses else []
    return master, [*common, "--worker", "--master-host", "127.0.0.1", "--master-port", port]


def hold(urls: list[str], sim_pids: list[int], locust: subprocess.Popen, workers: list[int], seconds: float) -> dict:
    """Poll the simulators every second while Locust runs: their peak running count (summed), and both sides' memory
    and descriptors at that peak."""
    peak: dict = {"running": 0.0}
    deadline = time.monotonic() + seconds + 300
    while locust.poll() is None and time.monotonic() < deadline:
        time.sleep(1)
        try:
            running = sum(scrape(url).get(RUNNING, 0.0) for url in urls)
            if running > peak["running"]:
                peak = {"running": running, "sim_rss_mib": [round(rss_mib(p)) for p in sim_pids]}
                peak |= {"sim_fds": [fds(p) for p in sim_pids], "worker_rss_mib": [round(rss_mib(w)) for w in workers]}
                peak["worker_fds"] = [fds(w) for w in workers]
        except (OSError, ValueError):  # a worker that just quit
            continue
    return peak


def finished(urls: list[str]) -> float:
    """Requests the simulators finished so far, every finish reason."""
    return sum(v for url in urls for k, v in scrape(url).items() if k.startswith("vllm:request_success_total"))


def accounting(folder: Path, served: float) -> str:
    rows = read_rows(folder / "requests.csv")
    run = json.loads((folder / "run.json").read_text())
    outcomes = Counter("ok" if r["ok"] == "1" else r["error"] for r in rows)
    aborted = outcomes.pop("Aborted", 0)
    return (
        f"{len(rows):,} rows: {outcomes['ok']:,} ok, {sum(outcomes.values()) - outcomes['ok']:,} failed "
        f"({dict(outcomes)}), {aborted:,} aborted; the servers finished {served:,.0f} "
        f"(rows - servers: {len(rows) - served:+,.0f}); run.json: server_requests {run.get('server_requests')}, "
        f"unaccounted_requests {run.get('unaccounted_requests')}, lost workers {len(run.get('lost_workers', []))}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=20000)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--servers", type=int, default=2, help="simulator processes (%(default)s)")
    parser.add_argument("--step", type=float, default=4.0, help="engine step, s (%(default)s)")
    parser.add_argument("--seconds", type=int, default=150)
    parser.add_argument("--spawn-rate", type=float, default=250.0)
    parser.add_argument("--output-tokens", type=int, default=16)
    parser.add_argument("--source-addresses", default="")
    parser.add_argument("--out", default="", help="keep the run folder here (default: a temporary one)")
    args = parser.parse_args()
    print("load before:", os.getloadavg(), flush=True)
    with tempfile.TemporaryDirectory() as tmp, ExitStack() as stack:
        out = Path(args.out) if args.out else Path(tmp) / "run"
        logs = [Path(tmp) / f"server-{i}.jsonl" for i in range(args.servers)]
        share = -(-args.streams // args.servers)
        sim_args = ["--profile", "cpu-tiny", "--max-num-seqs", str(share), "--max-model-len", "4096"]
        sim_args += ["--num-gpu-blocks-override", str(share * 8), "--max-num-batched-tokens", str(share * 64)]
        sim_args += ["--set", f"t_fixed={args.step}", "--set", "jitter=0"]  # every new request prefilled in one step
        sims = [stack.enter_context(start_simulator(*sim_args, "--request-log", str(log))) for log in logs]
        urls = [sim.url for sim in sims]
        master_cmd, worker_cmd = locust_commands(",".join(urls), args, out)
        locust = subprocess.Popen(master_cmd, cwd=REPO)
        workers = [subprocess.Popen(worker_cmd, cwd=REPO) for _ in range(args.workers)]
        peak = hold(urls, [sim.proc.pid for sim in sims], locust, [w.pid for w in workers], args.seconds)
        locust.wait(timeout=300)
        for worker in workers:
            worker.wait(timeout=120)
        deadline = time.monotonic() + 120  # the streams the stop aborted reach the counters at a later step
        while sum(scrape(url).get(RUNNING, 0.0) for url in urls) and time.monotonic() < deadline:
            time.sleep(1)
        served = finished(urls)
        for sim in sims:
            sim.stop()
        records = {k: v for log in logs for k, v in read_request_log(str(log)).items()}
        print(f"exit code {locust.returncode}; the simulators held {peak.pop('running'):,.0f} streams at most; {peak}")
        print("accounting:", accounting(out, served))
        rows = read_rows(out / "requests.csv")
        _ttft, _send, receive, _itl = errors(rows, records, skip=0.0)
        print(describe("first-token receive (client kernel time - server write)", receive))
        cpu, behind = Counter(), Counter()
        for r in read_rows(out / "client_health.csv"):
            cpu[r["worker"]] = max(cpu[r["worker"]], float(r["cpu_percent"]))
            behind[r["worker"]] = max(behind[r["worker"]], float(r["read_behind_p99_ms"] or 0))
        print("highest CPU % per process (client_health.csv):", dict(cpu))
        print("highest read-behind p99 per process, ms (client_health.csv):", dict(behind))
        print("load after:", os.getloadavg())


if __name__ == "__main__":
    main()
