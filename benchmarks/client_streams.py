"""Client CPU per streamed token: one Locust process (no workers) holding N concurrent streams of the simulator.

    .venv/bin/python benchmarks/client_streams.py [--users 1000] [--locustfile chat] [--seconds 20]

The simulator runs on core 0 and Locust on core 1 (``taskset``, when there are two cores). Its engine steps take at
least 50 ms (``t_fixed``), about 100 ms with 1,000 sequences in the batch, so each stream gets about 10 tokens/s
and every token arrives in its own SSE event and its own ``recv`` (the client's worst case: no batching). Locust runs twice, for
``--seconds`` and for twice that; the CPU and tokens of the longer run minus the shorter one give the cost per
token without start-up and ramp. Tokens are the output chunks the client received (``chunks`` of every row,
including the streams still running when the run stopped).
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.harness import read_rows
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent

STEP_S = 0.05  # engine step of the simulated server: each stream gets 1/STEP_S tokens per second


def pinned(cores: int | str, cmd: list[str]) -> list[str]:
    """``cmd`` under ``taskset -c cores`` (a core, or a list such as ``1`` or ``0-2,5``) where that can pin."""
    return ["taskset", "-c", str(cores), *cmd] if shutil.which("taskset") and (os.cpu_count() or 1) > 1 else cmd


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(url: str, locustfile: str, users: int, seconds: int, out: Path) -> tuple[float, int, list[dict]]:
    """One Locust run; returns (its CPU seconds, output chunks received, rows)."""
    cmd = pinned(
        1,
        [
            sys.executable,
            "-m",
            "locust",
            "-f",
            f"locustfiles/{locustfile}.py",
            "-H",
            url,
            "--headless",
            "-u",
            str(users),
            "-r",
            str(max(users // 5, 1)),
            "-t",
            f"{seconds}s",
            "--input-tokens",
            "32",
            "--output-tokens",
            "3000",
            "--results-dir",
            str(out),
            "--only-summary",
            "-L",
            "WARNING",
        ],
    )
    before = children_cpu()
    subprocess.run(cmd, cwd=REPO, check=True, timeout=seconds + 120)
    cpu = children_cpu() - before
    rows = read_rows(out / "requests.csv")
    return cpu, sum(int(r["chunks"]) for r in rows), rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--locustfile", default="chat")
    parser.add_argument("--seconds", type=int, default=20)
    args = parser.parse_args()
    sim_args = [
        "--profile",
        "cpu-tiny",
        "--max-num-seqs",
        "2048",
        "--max-model-len",
        "4096",
        "--set",
        f"t_fixed={STEP_S}",
        "--set",
        "jitter=0",
    ]
    with tempfile.TemporaryDirectory() as tmp, start_simulator(*sim_args) as sim:
        if (os.cpu_count() or 1) > 1:
            os.sched_setaffinity(sim.proc.pid, {0})
        short = run(sim.url, args.locustfile, args.users, args.seconds, Path(tmp) / "short")
        long = run(sim.url, args.locustfile, args.users, 2 * args.seconds, Path(tmp) / "long")
    cpu, tokens = long[0] - short[0], long[1] - short[1]
    rate = tokens / args.seconds
    print(
        f"{args.locustfile}: {args.users} streams, {rate:,.0f} tokens/s received, "
        f"{cpu / tokens * 1e6:.1f} us client CPU per token ({cpu:.1f} s CPU for {tokens:,} tokens)"
    )


if __name__ == "__main__":
    main()
