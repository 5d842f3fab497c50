"""What scraping ``/metrics`` costs a CPU vLLM: its CPU per scrape, and the TTFT and TPOT the chat user measures
while scraping every 1 s, every 5 s, or not at all.

    .venv/bin/python -m benchmarks.scrape_cost [--url URL] [--intervals 0,5,1] [--rounds 3] [--seconds 30] [--users 1]

Without ``--url`` it starts the real vLLM of the test tier (``deploy/real-vllm.sh``, pinned to its cores) and stops
it at the end; the clients run pinned to the other cores (``--client-cpus``, default the script's CLIENT_CPUS).

1. CPU per scrape: ``--scrapes`` GETs of ``/metrics`` on the idle server, one every 0.2 s; the server's own
   ``process_cpu_seconds_total`` (its API server process, which answers the scrape) before and after, divided by
   the scrapes, and the mean time one scrape took.
2. Scraping under load: ``locust -f locustfiles/chat.py`` with ``--users`` users for ``--seconds``, once per
   interval of ``--intervals`` (``--server-metrics-interval``; 0 = no scraping), the intervals alternating round
   by round so that the machine's load spreads over all of them. TTFT and TPOT of every successful request of an
   interval are pooled over its rounds.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import requests

from benchmarks.client_streams import pinned
from benchmarks.crosscheck_vllm_bench import real_vllm
from benchmarks.harness import read_rows
from vllm_stress.core.metrics import percentile

REPO = Path(__file__).resolve().parent.parent


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", default="", help="a running real vLLM (default: start one with deploy/real-vllm.sh)")
    parser.add_argument("--model", default="tiny-qwen2")
    parser.add_argument("--intervals", default="0,5,1", help="scrape intervals in seconds, 0 = none")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=30.0, help="per interval and round")
    parser.add_argument("--users", type=int, default=1)
    parser.add_argument("--input-tokens", type=int, default=128)
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--scrapes", type=int, default=50, help="scrapes of the idle server for the CPU per scrape")
    parser.add_argument("--client-cpus", default=None, help="taskset core list for the clients")
    return parser.parse_args()


def server_cpu_s(url: str) -> float:
    """The server's ``process_cpu_seconds_total`` (prometheus_client's process collector in vLLM's API server)."""
    text = requests.get(url + "/metrics", timeout=30).text
    return next(float(line.split()[-1]) for line in text.splitlines() if line.startswith("process_cpu_seconds_total"))


def cpu_per_scrape(url: str, scrapes: int) -> tuple[float, float]:
    """(server CPU ms per scrape, ms one scrape took) over ``scrapes`` scrapes of the idle server."""
    before = server_cpu_s(url)
    took = []
    for _ in range(scrapes):
        start = time.perf_counter()
        requests.get(url + "/metrics", timeout=30).raise_for_status()
        took.append(time.perf_counter() - start)
        time.sleep(0.2)
    after = server_cpu_s(url)  # this scrape's own CPU is counted in ``after`` only partly: one in ``scrapes`` + 1
    return 1000 * (after - before) / (scrapes + 1), 1000 * sum(took) / len(took)


def run_chat(args, url: str, interval: float, out: Path) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "locustfiles/chat.py",
        "-H",
        url,
        "--model",
        args.model,
        "-u",
        str(args.users),
        "-r",
        "100",
        "-t",
        f"{round(args.seconds)}s",
        "--stop-timeout",
        "60",
        "--input-tokens",
        str(args.input_tokens),
        "--output-tokens",
        str(args.output_tokens),
        "--server-metrics-interval",
        str(interval),
        "--headless",
        "--only-summary",
        "-L",
        "WARNING",
        "--results-dir",
        str(out),
        "--overwrite",
    ]
    cmd = pinned(args.client_cpus, cmd) if args.client_cpus else cmd
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=args.seconds + 300)
    if proc.returncode != 0:
        sys.exit(f"locust failed:\n{proc.stderr[-3000:]}")
    return [row for row in read_rows(out / "requests.csv") if row["ok"] == "1"]


def column_ms(rows: list[dict], name: str) -> np.ndarray:
    return np.array([1000 * float(row[name]) for row in rows if row[name]])


def measure(args, url: str) -> None:
    print(f"load average {os.getloadavg()[0]:.2f}; client cores {args.client_cpus or 'any'}", flush=True)
    cpu_ms, took_ms = cpu_per_scrape(url, args.scrapes)
    print(f"idle server: {cpu_ms:.1f} ms of server CPU per /metrics scrape, {took_ms:.1f} ms per scrape", flush=True)
    intervals = [float(value) for value in args.intervals.split(",")]
    rows: dict[float, list[dict]] = {interval: [] for interval in intervals}
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(args.rounds):
            for interval in intervals:
                got = run_chat(args, url, interval, Path(tmp) / f"{number}-{interval}")
                rows[interval] += got
                print(
                    f"round {number + 1} interval {interval:g} s: {len(got)} requests, TTFT p50 "
                    f"{percentile(column_ms(got, 'ttft_s'), 50):.1f} ms, load {os.getloadavg()[0]:.2f}",
                    flush=True,
                )
    print("\n| scrape interval | requests | TTFT p50 / p90 / p99 (ms) | TPOT p50 / p90 (ms) |\n|---|---|---|---|")
    for interval, done in rows.items():
        ttft, tpot = column_ms(done, "ttft_s"), column_ms(done, "tpot_s")
        label = f"{interval:g} s" if interval else "off"
        print(
            f"| {label} | {len(done)} | {percentile(ttft, 50):.1f} / {percentile(ttft, 90):.1f} / "
            f"{percentile(ttft, 99):.1f} | {percentile(tpot, 50):.2f} / {percentile(tpot, 90):.2f} |"
        )
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")


def main() -> None:
    args = parse_args()
    with tempfile.TemporaryDirectory() as tmp, real_vllm(args, Path(tmp)) as url:
        measure(args, url)


if __name__ == "__main__":
    main()
