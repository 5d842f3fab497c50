"""Client CPU per streamed token, side by side: our chat user and vLLM's own benchmark client on one simulator.

    .venv/bin/python -m benchmarks.client_vs_vllm [--streams 200] [--rounds 3]
    .venv/bin/python -m benchmarks.client_vs_vllm --short [--output-tokens 200] [--step-s 0.02]
    .venv/bin/python -m benchmarks.client_vs_vllm --fit 64,512 --step-s 0.02

The simulator (``--served-model-name tiny-qwen2``, engine steps of at least ``--step-s``, 50 ms by default: one token
per chunk, about 10-20 tokens/s per stream) runs on core 0; each client in turn runs alone on core 1 (``taskset``), at the same concurrency:

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

``--short`` measures what users pay: answers of ``--output-tokens`` (200 unless given), so requests start and end
throughout the window, and vLLM's client gets enough prompts to stay busy past it. Both clients' requests start
spread over one request lifetime (``STAGGER``), and the warm-up lasts at least two lifetimes. The same window also gives the
requests the server finished in it (``vllm:request_success_total``): each round prints CPU per token, per request
and per second of both, and the end prints their medians over the rounds with each one's spread (the farthest round
from the median, in per cent of it).

``--fit A,B`` runs our client alone, short answers of A and of B tokens back to back in each round, and solves the
round's two windows for its CPU per token and per request (``cpu = a × tokens + b × requests``).
"""

from __future__ import annotations

import argparse
import os
import statistics
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
# --short: vLLM's client sends at this many times the rate its streams can finish (Poisson arrivals, Locust's users
# start at the rate that fills theirs in one lifetime), so that both clients' requests end spread over a lifetime and
# no stream waits for an arrival; all sent at once, they would end in waves of every stream, and a window would catch
# one wave more or less by its phase alone
STAGGER = 1.25


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
            str(args.streams / lifetime_s(args) if args.short else max(args.streams // 5, 1)),
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
            str(prompts(args)),
            "--max-concurrency",
            str(args.streams),
            "--ignore-eos",
            "--disable-tqdm",
            *(["--request-rate", f"{STAGGER * args.streams / lifetime_s(args):.2f}"] if args.short else []),
        ],
    )


def lifetime_s(args) -> float:
    """The shortest lifetime of a request: its answer at one token per engine step of ``--step-s``."""
    return args.output_tokens * args.step_s


def prompts(args) -> int:
    """Enough prompts for vLLM's client to keep every stream busy past the window (twice the streams when no
    stream ends in it)."""
    if not args.short:
        return 2 * args.streams
    seconds_per_request = args.output_tokens * args.step_s
    return args.streams * int(2 * (START_TIMEOUT_S / 10 + args.warmup + args.seconds) / seconds_per_request + 2)


def finished_requests(url: str) -> float:
    return sum(value for name, value in scrape(url).items() if name.startswith("vllm:request_success_total{"))


def window_cost(url: str, cmd: list[str], args) -> tuple[float, float, float]:
    """Run ``cmd`` until the window is measured; its CPU seconds in the window, the tokens the server generated and
    the requests it finished in it."""
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
        time.sleep(max(args.warmup, 2 * lifetime_s(args)) if args.short else args.warmup)
        cpu, tokens, requests = cpu_seconds(proc.pid), generated_tokens(url), finished_requests(url)
        time.sleep(args.seconds)
        if proc.poll() is not None:
            sys.exit(f"{cmd[3:5]} ended inside the window: raise --output-tokens (or prompts())")
        cpu, tokens = cpu_seconds(proc.pid) - cpu, generated_tokens(url) - tokens
        requests = finished_requests(url) - requests
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    while scrape(url)["vllm:num_requests_running{}"]:  # the client's aborted streams to leave the engine
        time.sleep(0.5)
    return cpu, tokens, requests


def per_request_ms(cpu: float, requests: float) -> str:
    """CPU per request finished in the window; "-" when none finished (answers longer than the window)."""
    return f"{cpu / requests * 1e3:.2f}" if requests else "-"


def spread(values: list[float]) -> str:
    middle = statistics.median(values)
    return f"{middle:.1f} (±{max(abs(value - middle) for value in values) / middle * 100:.0f} %)"


def report(costs: dict[str, list[tuple[float, float, float]]], seconds: float) -> None:
    """Each client's medians over the rounds: CPU per token (µs), per request (ms), per second (% of a core)."""
    for name, rounds in costs.items():
        per_token = [cpu / tokens * 1e6 for cpu, tokens, _ in rounds]
        per_request = [cpu / requests * 1e3 for cpu, _, requests in rounds if requests]
        per_second = [cpu / seconds * 100 for cpu, _, _ in rounds]
        print(
            f"{name}: {spread(per_token)} us CPU per token, {spread(per_request) if per_request else '-'} ms per "
            f"request, {spread(per_second)} % of a core; requests per round {[int(r[2]) for r in rounds]}",
            flush=True,
        )
    ours, vllm = ([cpu / tokens for cpu, tokens, _ in costs[name]] for name in costs)
    print(f"ratio ours / vLLM's per token: median {statistics.median(ours) / statistics.median(vllm):.2f}")


def fit(url: str, args) -> None:
    """Our client's CPU per token and per request from two windows with answers of two lengths."""
    windows = []
    for length in (int(n) for n in args.fit.split(",")):
        args.output_tokens = length
        cpu, tokens, requests = window_cost(url, ours(url, args), args)
        windows.append((cpu, tokens, requests))
        print(f"{length} tokens: {cpu / tokens * 1e6:.1f} us per token, {cpu / requests * 1e3:.2f} ms per request")
    (cpu_a, tokens_a, requests_a), (cpu_b, tokens_b, requests_b) = windows
    determinant = tokens_a * requests_b - tokens_b * requests_a
    per_token = (cpu_a * requests_b - cpu_b * requests_a) / determinant
    per_request = (tokens_a * cpu_b - tokens_b * cpu_a) / determinant
    print(f"fit: {per_token * 1e6:.1f} us per token + {per_request * 1e3:.3f} ms per request; load {os.getloadavg()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--output-tokens", type=int, help="answer length (1000; 200 with --short)")
    parser.add_argument("--short", action="store_true", help="short answers: requests start and end in the window")
    parser.add_argument("--fit", help="A,B: our client alone at two answer lengths, its CPU per token and request")
    parser.add_argument("--step-s", type=float, default=0.05, help="the simulator's shortest engine step (%(default)s)")
    parser.add_argument(
        "--warmup",
        type=float,
        default=10.0,
        help="seconds from the first token to the window (--short: 2 lifetimes at least)",
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="the measuring window (%(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="pairs of measurements (%(default)s)")
    args = parser.parse_args()
    args.output_tokens = args.output_tokens or (200 if args.short else 1000)
    args.short = args.short or bool(args.fit)
    if not VLLM_PYTHON.exists() and not args.fit:
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
        f"t_fixed={args.step_s}",
        "--set",
        "jitter=0",
    ]
    print("load before:", os.getloadavg(), flush=True)
    with start_simulator(*sim_args) as sim:
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(sim.proc.pid, {0})
        if args.fit:
            for _ in range(args.rounds):
                fit(sim.url, args)
            return
        costs: dict[str, list[tuple[float, float, float]]] = {"ours": [], "vllm.benchmarks.serve": []}
        for _ in range(args.rounds):
            costs["vllm.benchmarks.serve"].append(window_cost(sim.url, theirs(sim.url, args), args))
            costs["ours"].append(window_cost(sim.url, ours(sim.url, args), args))
            (cpu, tokens, requests), (their_cpu, their_tokens, their_requests) = (c[-1] for c in costs.values())
            print(
                f"{args.streams} streams: ours {cpu / tokens * 1e6:.1f} us CPU per token "
                f"({per_request_ms(cpu, requests)} ms per request), vllm.benchmarks.serve "
                f"{their_cpu / their_tokens * 1e6:.1f} us ({per_request_ms(their_cpu, their_requests)} ms), "
                f"ratio {cpu / tokens / (their_cpu / their_tokens):.2f}; load {os.getloadavg()}",
                flush=True,
            )
        report(costs, args.seconds)


if __name__ == "__main__":
    main()
