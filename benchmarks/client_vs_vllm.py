"""Client CPU per streamed token, side by side: our chat user and vLLM's own benchmark client on one simulator.

    .venv/bin/python -m benchmarks.client_vs_vllm [--streams 200] [--rounds 3]

The simulator (``--served-model-name tiny-qwen2``, engine steps of at least 50 ms: one token per chunk, about 10-20
tokens/s per stream) runs on core 0; each client in turn runs alone on core 1 (``taskset``), at the same concurrency:

* ours: ``locust -f locustfiles/chat.py`` in one process, ``--streams`` users;
* vLLM's: ``vllm.benchmarks.serve`` (the code behind ``vllm bench serve``, from the real-vLLM tier's venv,
  ``deploy/real-vllm.sh install``), ``--backend openai-chat``, ``--max-concurrency`` = ``--streams``, random dataset,
  ``--ignore-eos``.

Both measured the same way, in one window of the same run: once the server streams, ``--warmup`` seconds (Locust's
ramp, vLLM's all-at-once start), then ``--seconds`` of the client's CPU (user + system, ``/proc/PID/stat``) over the
tokens the server generated meanwhile (``vllm:generation_tokens_total``; the client is its only one). Answers are
``--output-tokens`` long so that no stream ends in the window: start-up, dataset building and per-request costs stay
out of it for both. The client is then stopped and the server drained before the next one. Each round measures
both, vLLM's first; prints both and the ratio ours / vLLM's, and the load average.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.client_streams import pinned
from benchmarks.crosscheck_vllm_bench import BENCH, HOME, VLLM_PYTHON
from benchmarks.harness import scrape
from benchmarks.simulator_streams import cpu_seconds, generated_tokens
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent

MODEL = "tiny-qwen2"
START_TIMEOUT_S = 300.0  # vLLM's client imports torch and builds its dataset before it sends anything


def ours(url: str, args) -> list[str]:
    return pinned(
        1,
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            "locustfiles/chat.py",
            "-H",
            url,
            "--headless",
            "-u",
            str(args.streams),
            "-r",
            str(max(args.streams // 5, 1)),
            "-t",
            "1h",
            "--input-tokens",
            "32",
            "--output-tokens",
            str(args.output_tokens),
            "--only-summary",
            "-L",
            "WARNING",
            "--server-metrics-interval",
            "0",
        ],
    )


def theirs(url: str, args) -> list[str]:
    return pinned(
        1,
        [
            str(VLLM_PYTHON),
            "-c",
            BENCH,
            "--backend",
            "openai-chat",
            "--endpoint",
            "/v1/chat/completions",
            "--base-url",
            url,
            "--model",
            MODEL,
            "--tokenizer",
            str(HOME / "model"),
            "--dataset-name",
            "random",
            "--random-input-len",
            "16",
            "--random-output-len",
            str(args.output_tokens),
            "--num-prompts",
            str(2 * args.streams),
            "--max-concurrency",
            str(args.streams),
            "--ignore-eos",
            "--disable-tqdm",
        ],
    )


def window_cpu_per_token(url: str, cmd: list[str], args) -> float:
    """Run ``cmd`` until the window is measured; its CPU seconds per token the server generated in the window."""
    with open(os.devnull, "w") as devnull:
        proc = subprocess.Popen(
            cmd, cwd=REPO, stdout=devnull, stderr=subprocess.STDOUT, env=os.environ | {"HF_HUB_OFFLINE": "1"}
        )
    try:
        idle, deadline = generated_tokens(url), time.monotonic() + START_TIMEOUT_S
        while generated_tokens(url) == idle:
            if proc.poll() is not None or time.monotonic() > deadline:
                sys.exit(f"{cmd[3:5]} did not stream (exit code {proc.poll()})")
            time.sleep(0.5)
        time.sleep(args.warmup)
        cpu, tokens = cpu_seconds(proc.pid), generated_tokens(url)
        time.sleep(args.seconds)
        if proc.poll() is not None:
            sys.exit(f"{cmd[3:5]} ended inside the window: raise --output-tokens")
        cpu, tokens = cpu_seconds(proc.pid) - cpu, generated_tokens(url) - tokens
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    while scrape(url)["vllm:num_requests_running{}"]:  # the client's aborted streams to leave the engine
        time.sleep(0.5)
    return cpu / tokens


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--output-tokens", type=int, default=1000, help="answer length (%(default)s)")
    parser.add_argument("--warmup", type=float, default=10.0, help="seconds from the first token to the window")
    parser.add_argument("--seconds", type=float, default=15.0, help="the measuring window (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of measurements (%(default)s)")
    args = parser.parse_args()
    if not VLLM_PYTHON.exists():
        sys.exit(f"no vLLM client at {VLLM_PYTHON}: run deploy/real-vllm.sh install first")
    sim_args = [
        "--profile",
        "cpu-tiny",
        "--served-model-name",
        MODEL,
        "--max-num-seqs",
        "2048",
        "--max-model-len",
        "4096",
        "--set",
        "t_fixed=0.05",
        "--set",
        "jitter=0",
    ]
    print("load before:", os.getloadavg(), flush=True)
    with start_simulator(*sim_args) as sim:
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(sim.proc.pid, {0})
        for _ in range(args.rounds):
            vllm = window_cpu_per_token(sim.url, theirs(sim.url, args), args)
            mine = window_cpu_per_token(sim.url, ours(sim.url, args), args)
            print(
                f"{args.streams} streams: ours {mine * 1e6:.1f} us CPU per token, vllm.benchmarks.serve "
                f"{vllm * 1e6:.1f} us, ratio {mine / vllm:.2f}; load {os.getloadavg()}",
                flush=True,
            )


if __name__ == "__main__":
    main()
