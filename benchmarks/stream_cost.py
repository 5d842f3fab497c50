"""What one open stream costs a load process, and the simulator: memory (RSS), file descriptors and CPU per
stream-second, at slow token rates (many streams open, few tokens each).

    .venv/bin/python -m benchmarks.stream_cost [--streams 1000,4000] [--steps 1,4] [--window 20]

For each engine step time S (``--steps``, seconds: each stream gets 1/S tokens per second) and each stream count N
(``--streams``), one Locust process (the chat user, no workers: a worker's users and recorder) holds N closed-loop
streams of the simulator (``cpu-tiny``, 32-token prompts, 4,000-token answers that never end during the run). Once
the simulator runs all N (its ``vllm:num_requests_running``), the script reads both processes' RSS
(/proc/PID/status), open descriptors (/proc/PID/fd) and, over ``--window`` seconds, their CPU (user + system) and
the tokens streamed (the simulator's ``vllm:generation_tokens_total``). The simulator runs on core 0 and Locust on
core 1.

Per stream: the difference of two stream counts' RSS and descriptors over the difference of the counts (the
process's own base cancels out). CPU: a least-squares fit of CPU = a × streams + b × tokens/s over every (N, S), so
``a`` is the CPU of one open stream per second without tokens and ``b`` the CPU per token."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.client_streams import pinned
from benchmarks.harness import scrape
from benchmarks.master_rows import process_cpu_s
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent
RUNNING = "vllm:num_requests_running{}"
TOKENS = "vllm:generation_tokens_total{}"


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise ValueError(f"no VmRSS for {pid}")


def fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def wait_running(url: str, streams: int, timeout: float) -> float:
    """Seconds until the simulator runs ``streams`` requests (TimeoutError past ``timeout``)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if scrape(url).get(RUNNING, 0) >= streams:
            return time.monotonic() - start
        time.sleep(1)
    raise TimeoutError(f"the simulator runs {scrape(url).get(RUNNING)} of {streams} streams after {timeout:g} s")


def measure(url: str, sim_pid: int, streams: int, window: float, out: Path) -> dict:
    cmd = [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "-H", url, "--headless", "--only-summary"]
    cmd += ["-u", str(streams), "-r", str(min(streams, 500)), "-t", "900s", "--input-tokens", "32"]
    cmd += ["--output-tokens", "4000", "--results-dir", str(out), "-L", "WARNING"]
    proc = subprocess.Popen(pinned(1, cmd), cwd=REPO)
    try:
        ramp_s = wait_running(url, streams, timeout=300)
        time.sleep(2)  # the last streams' first tokens
        before = scrape(url)[TOKENS], process_cpu_s(proc.pid), process_cpu_s(sim_pid), time.monotonic()
        time.sleep(window)
        after = scrape(url)[TOKENS], process_cpu_s(proc.pid), process_cpu_s(sim_pid), time.monotonic()
        figures = {"rss_mib": rss_mib(proc.pid), "fds": fds(proc.pid)}
        figures |= {"sim_rss_mib": rss_mib(sim_pid), "sim_fds": fds(sim_pid)}
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=120)
    seconds = after[3] - before[3]
    return figures | {
        "streams": streams,
        "ramp_s": ramp_s,
        "tokens_per_s": (after[0] - before[0]) / seconds,
        "cpu": (after[1] - before[1]) / seconds,
        "sim_cpu": (after[2] - before[2]) / seconds,
    }


def fit(results: list[dict], cpu: str) -> tuple[float, float]:
    """(CPU s per stream-second without tokens, CPU s per token) of ``cpu``, least squares through the origin."""
    design = np.array([[r["streams"], r["tokens_per_s"]] for r in results])
    per_stream, per_token = np.linalg.lstsq(design, np.array([r[cpu] for r in results]), rcond=None)[0]
    return float(per_stream), float(per_token)


def per_stream(results: list[dict], key: str) -> float:
    low, high = min(results, key=lambda r: r["streams"]), max(results, key=lambda r: r["streams"])
    return (high[key] - low[key]) / (high["streams"] - low["streams"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", default="1000,4000")
    parser.add_argument("--steps", default="1,4", help="engine step times, seconds")
    parser.add_argument("--window", type=float, default=20.0)
    args = parser.parse_args()
    counts = [int(n) for n in args.streams.split(",")]
    results = []
    print("step s | streams | ramp s | tokens/s | Locust RSS MiB, fds, CPU % | simulator RSS MiB, fds, CPU %")
    for step in map(float, args.steps.split(",")):
        sim_args = ["--profile", "cpu-tiny", "--max-num-seqs", str(max(counts)), "--max-model-len", "4096"]
        sim_args += ["--num-gpu-blocks-override", str(max(counts) * 260), "--set", f"t_fixed={step}"]
        sim_args += ["--max-num-batched-tokens", str(max(counts) * 64)]  # every new stream prefilled in one step
        with tempfile.TemporaryDirectory() as tmp, start_simulator(*sim_args, "--set", "jitter=0") as sim:
            os.sched_setaffinity(sim.proc.pid, {0})
            for n in counts:
                r = measure(sim.url, sim.proc.pid, n, args.window, Path(tmp) / str(n)) | {"step": step}
                results.append(r)
                print(
                    f"{step:g} | {n:,} | {r['ramp_s']:.0f} | {r['tokens_per_s']:,.0f} | {r['rss_mib']:.0f}, "
                    f"{r['fds']:,}, {100 * r['cpu']:.1f} | {r['sim_rss_mib']:.0f}, {r['sim_fds']:,}, "
                    f"{100 * r['sim_cpu']:.1f}",
                    flush=True,
                )
    first = [r for r in results if r["step"] == results[0]["step"]]
    for who, prefix in (("Locust", ""), ("simulator", "sim_")):
        stream_s, token_s = fit(results, prefix + "cpu")
        print(
            f"{who}: {1024 * per_stream(first, prefix + 'rss_mib'):.1f} KiB RSS and "
            f"{per_stream(first, prefix + 'fds'):.2f} fds per stream; CPU {stream_s * 1e6:.1f} us per stream-second "
            f"+ {token_s * 1e6:.1f} us per token"
        )


if __name__ == "__main__":
    main()
