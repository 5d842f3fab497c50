"""Client CPU per streamed token, side by side: our chat user and vLLM's own benchmark client on one simulator.

    .venv/bin/python -m benchmarks.client_vs_vllm [--streams 200] [--output-tokens 100] [--rounds 2]

The simulator (``--served-model-name tiny-qwen2``, engine steps of at least 50 ms: one token per chunk, about 10-20
tokens/s per stream) runs on core 0; each client in turn runs alone on core 1 (``taskset``), at the same concurrency:

* ours: ``locust -f locustfiles/chat.py`` in one process, ``--streams`` users, for ``--seconds`` and for twice that;
* vLLM's: ``vllm.benchmarks.serve`` (the code behind ``vllm bench serve``, from the real-vLLM tier's venv,
  ``deploy/real-vllm.sh install``), ``--backend openai-chat``, ``--max-concurrency`` = ``--streams``, 2 x ``--streams`` prompts of the
  random dataset, ``--ignore-eos``, with ``--output-tokens`` and twice that.

Each client's CPU (user + system, from ``getrusage`` of the finished child) and tokens of its longer run minus its
shorter one give its cost per token without start-up (vLLM's import and dataset, Locust's ramp). vLLM's two runs send the
same requests, so its per-request costs cancel out and only its streaming cost is left; ours keep theirs: the
comparison leans in vLLM's favour. Tokens: the output chunks our
rows counted; vLLM's ``total_output_tokens``. Prints both and the ratio ours / vLLM's, and the load average.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.client_streams import pinned
from benchmarks.crosscheck_vllm_bench import BENCH, HOME, VLLM_PYTHON
from simulator.process import start_simulator
from tests.conftest import read_rows

REPO = Path(__file__).resolve().parent.parent

MODEL = "tiny-qwen2"


def child_cpu(cmd: list[str], timeout: float, env: dict | None = None) -> float:
    """Run ``cmd`` to its end; the CPU seconds it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=timeout, env=env)
    if proc.returncode != 0:
        sys.exit(f"{cmd[2:4]} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def ours(url: str, args, seconds: int, out: Path) -> tuple[float, int]:
    cmd = pinned(1, [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "-H", url, "--headless",
                     "-u", str(args.streams), "-r", str(max(args.streams // 5, 1)), "-t", f"{seconds}s",
                     "--input-tokens", "32", "--output-tokens", str(args.output_tokens), "--results-dir", str(out),
                     "--only-summary", "-L", "WARNING", "--server-metrics-interval", "0"])
    cpu = child_cpu(cmd, seconds + 180)
    return cpu, sum(int(row["chunks"]) for row in read_rows(out / "requests.csv"))


def theirs(url: str, args, output_tokens: int, out: Path) -> tuple[float, int]:
    cmd = pinned(1, [str(VLLM_PYTHON), "-c", BENCH, "--backend", "openai-chat", "--endpoint", "/v1/chat/completions",
                     "--base-url", url, "--model", MODEL, "--tokenizer", str(HOME / "model"), "--dataset-name",
                     "random", "--random-input-len", "16", "--random-output-len", str(output_tokens),
                     "--num-prompts", str(2 * args.streams), "--max-concurrency", str(args.streams), "--ignore-eos",
                     "--disable-tqdm", "--save-result", "--result-dir", str(out), "--result-filename", "bench.json"])
    cpu = child_cpu(cmd, 1800, os.environ | {"HF_HUB_OFFLINE": "1"})
    return cpu, json.loads((out / "bench.json").read_text())["total_output_tokens"]


def per_token(short: tuple[float, int], long: tuple[float, int]) -> float:
    return (long[0] - short[0]) / (long[1] - short[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--output-tokens", type=int, default=100)
    parser.add_argument("--seconds", type=int, default=20, help="our shorter run (%(default)s)")
    parser.add_argument("--rounds", type=int, default=1, help="alternating pairs of measurements (%(default)s)")
    args = parser.parse_args()
    if not VLLM_PYTHON.exists():
        sys.exit(f"no vLLM client at {VLLM_PYTHON}: run deploy/real-vllm.sh install first")
    sim_args = ["--profile", "cpu-tiny", "--served-model-name", MODEL, "--max-num-seqs", "2048",
                "--max-model-len", "4096", "--set", "t_fixed=0.05", "--set", "jitter=0"]
    print("load before:", os.getloadavg(), flush=True)
    with tempfile.TemporaryDirectory() as tmp, start_simulator(*sim_args) as sim:
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(sim.proc.pid, {0})
        for number in range(args.rounds):
            folder = Path(tmp) / str(number)
            vllm = per_token(theirs(sim.url, args, args.output_tokens, folder / "v1"),
                             theirs(sim.url, args, 2 * args.output_tokens, folder / "v2"))  # fmt: skip
            mine = per_token(ours(sim.url, args, args.seconds, folder / "o1"),
                             ours(sim.url, args, 2 * args.seconds, folder / "o2"))  # fmt: skip
            print(f"{args.streams} streams: ours {mine * 1e6:.1f} us CPU per token, vllm.benchmarks.serve "
                  f"{vllm * 1e6:.1f} us, ratio {mine / vllm:.2f}; load {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
