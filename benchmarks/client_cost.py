"""The chat user's CPU per streamed token with requests starting and ending (per-request work included), against two
server implementations: the simulator (which writes a step's tokens from its driver) and a plain aiohttp server that
writes each token from its own coroutine (benchmarks/plain_server.py).

    .venv/bin/python -m benchmarks.client_cost [--servers simulator,plain] [--streams 200] [--output-tokens 200]
        [--interval 0.02] [--warmup 10] [--seconds 20] [--rounds 3]

Each server in turn runs on core 0 and one Locust process (the chat user, no workers) on core 1, ``--streams``
closed-loop users with 32-token prompts and ``--output-tokens`` answers, a token every ``--interval`` seconds per
stream (the simulator's engine step; the plain server's sleep between writes). After ``--warmup`` seconds, the
window: Locust's CPU (user + system, /proc/PID/stat) over ``--seconds``, divided by the tokens the server counted
in it (``vllm:generation_tokens_total``). Rounds alternate the servers; the medians are printed last."""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.client_streams import pinned
from benchmarks.harness import scrape
from benchmarks.master_rows import process_cpu_s
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.process import start_simulator, stop_process

REPO = Path(__file__).resolve().parent.parent
TOKENS = "vllm:generation_tokens_total{}"


def plain_server(interval: float) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.plain_server", "--port", str(port), "--token-interval", str(interval)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    proc.stdout.readline()  # its ready line
    return proc, f"http://127.0.0.1:{port}"


def window(url: str, args: argparse.Namespace, out: Path) -> float:
    """One Locust run against ``url``: µs of its CPU per token the server counted in the window."""
    cmd = [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "-H", url, "--headless", "--only-summary"]
    cmd += ["-u", str(args.streams), "-r", str(args.streams), "-t", "600s", "--input-tokens", "32"]
    cmd += ["--output-tokens", str(args.output_tokens), "--results-dir", str(out), "-L", "WARNING"]
    proc = subprocess.Popen(pinned(1, cmd), cwd=REPO)
    try:
        time.sleep(args.warmup)
        tokens, cpu = scrape(url)[TOKENS], process_cpu_s(proc.pid)
        time.sleep(args.seconds)
        tokens, cpu = scrape(url)[TOKENS] - tokens, process_cpu_s(proc.pid) - cpu
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    return 1e6 * cpu / tokens


def measure(server: str, args: argparse.Namespace, out: Path) -> float:
    if server == "plain":
        proc, url = plain_server(args.interval)
        os.sched_setaffinity(proc.pid, {0})
        try:
            return window(url, args, out)
        finally:
            stop_process(proc, 10)
    sim_args = ["--profile", "cpu-tiny", "--max-num-seqs", str(args.streams), "--set", f"t_fixed={args.interval}"]
    with start_simulator(*sim_args, "--set", "jitter=0") as sim:
        os.sched_setaffinity(sim.proc.pid, {0})
        return window(sim.url, args, out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--servers", default="simulator,plain")
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--output-tokens", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.02)
    parser.add_argument("--warmup", type=float, default=10.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {server: [] for server in args.servers.split(",")}
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            for server in figures:
                us = measure(server, args, Path(tmp) / f"{server}-{round_}")
                figures[server].append(us)
                print(f"round {round_ + 1}, {server}: {us:.1f} us per token, load {os.getloadavg()[0]:.1f}", flush=True)
    for server, values in figures.items():
        print(
            f"{server}: median {statistics.median(values):.1f} us per token ({' / '.join(f'{v:.1f}' for v in values)})"
        )


if __name__ == "__main__":
    main()
