"""Soak: a Locust master and one worker hold N concurrent streams of the simulator for minutes; does memory grow?

    .venv/bin/python benchmarks/soak.py [--users 1000] [--minutes 5] [--out results/soak]

The simulator serves every stream at once (``--max-num-seqs`` = users) at about 10 tokens/s each (a 0.1 s engine
step), so the two cores are loaded but not saturated. Every ``--sample`` seconds the RSS and CPU of the master, the
worker and the simulator are sampled (psutil). The report compares the mean RSS of the first minute after the ramp
with that of the last minute, and prints the run's request count and failures. Samples go to OUT/samples.csv.
"""

from __future__ import annotations

import argparse
import csv
import os
import subprocess
import sys
import time
from pathlib import Path

import psutil

from benchmarks.harness import chat_locust, read_rows
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent

RAMP_S = 20.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    parser.add_argument("--output-tokens", type=int, default=64)
    parser.add_argument("--out", default="results/soak")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    run_s = args.minutes * 60 + RAMP_S
    sim = start_simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.1", "--max-num-seqs", str(args.users))
    port = str(free_port())
    common = chat_locust(sim.url, args.output_tokens)
    logs = open(out / "locust.log", "w")  # noqa: SIM115 (open for the children's lifetime)
    master = subprocess.Popen(
        [
            *common,
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            port,
            "--expect-workers",
            "1",
            "-u",
            str(args.users),
            "-r",
            str(args.users / RAMP_S),
            "-t",
            f"{run_s:.0f}s",
            "--stop-timeout",
            "0",
            "--results-dir",
            str(out / "run"),
            "--overwrite",
            "--csv",
            str(out / "run" / "locust"),
        ],
        cwd=REPO,
        stdout=logs,
        stderr=subprocess.STDOUT,
    )
    worker = subprocess.Popen(
        [*common, "--worker", "--master-port", port], cwd=REPO, stdout=logs, stderr=subprocess.STDOUT
    )
    procs = {
        "master": psutil.Process(master.pid),
        "worker": psutil.Process(worker.pid),
        "simulator": psutil.Process(sim.proc.pid),
    }
    for proc in procs.values():
        proc.cpu_percent()
    samples = []
    start = time.time()
    try:
        while master.poll() is None:
            time.sleep(args.sample)
            t = time.time() - start
            row = {"t_s": round(t)}
            for name, proc in procs.items():
                try:
                    row[f"{name}_rss_mb"] = round(proc.memory_info().rss / 2**20, 1)
                    row[f"{name}_cpu_pct"] = round(proc.cpu_percent(), 1)
                except psutil.NoSuchProcess:
                    row[f"{name}_rss_mb"] = row[f"{name}_cpu_pct"] = ""
            samples.append(row)
            print(row, flush=True)
    finally:
        master.wait()
        worker.wait(timeout=30)
        sim.stop()
        logs.close()
    with open(out / "samples.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(samples[0]))
        writer.writeheader()
        writer.writerows(samples)
    report(samples, out / "run" / "requests.csv", run_s)
    return 0


def report(samples: list[dict], requests_csv: Path, run_s: float) -> None:
    steady = [s for s in samples if RAMP_S + 10 <= s["t_s"] <= run_s and s["master_rss_mb"] != ""]
    first = [s for s in steady if s["t_s"] < steady[0]["t_s"] + 60]
    last = [s for s in steady if s["t_s"] > steady[-1]["t_s"] - 60]
    print("\n| process | RSS first minute (MB) | RSS last minute (MB) | growth (MB) | mean CPU % |")
    print("| --- | --- | --- | --- | --- |")
    for name in ("master", "worker", "simulator"):
        a = sum(s[f"{name}_rss_mb"] for s in first) / len(first)
        b = sum(s[f"{name}_rss_mb"] for s in last) / len(last)
        cpu = sum(s[f"{name}_cpu_pct"] for s in steady) / len(steady)
        print(f"| {name} | {a:.1f} | {b:.1f} | {b - a:+.1f} ({(b - a) / a:+.1%}) | {cpu:.0f} |")
    rows = read_rows(requests_csv)
    failed = {}
    for r in rows:
        if r["ok"] == "0":
            failed[r["error"]] = failed.get(r["error"], 0) + 1
    tokens = sum(int(r["completion_tokens"] or 0) for r in rows)
    print(f"\n{len(rows)} requests, {tokens} output tokens ({tokens / run_s:.0f}/s over the run), failures: {failed}")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    sys.exit(main())
