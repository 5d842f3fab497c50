"""The master's capacity: the request rows per second it ingests and writes while its heartbeats stay on time.

    .venv/bin/python -m benchmarks.master_rows [--rates 5000,10000,20000,40000] [--workers 4] [--seconds 30]
        [--in-flight 5000]

A real master (Locust's ``--master`` with the suite's plugin) and ``--workers`` real Locust worker processes whose
users (benchmarks/master_rows_user.py) send no request: they hand the worker's recorder 200-token chat rows at the
set rate, which travel to the master with the worker's reports every 3 s, as a loaded worker's do. Each worker also
keeps ``--in-flight`` requests in flight (their progress rides on every report, as real streams' does). An idle
simulator answers the test-start checks. Nothing is pinned: on a shared machine a pinned master waits for its core.

Per rate: the rows the workers handed over (Locust's user count × rate × time, read back as the rows in
requests.csv: they must agree), the master's CPU (its own /proc figures, user + system) and that CPU per row
written (so the rows one core of the master handles a second, however busy the machine), its event-loop lag
(client_health.csv, the master's own samples), and the latest a heartbeat reply of the master reached a worker (the
largest gap between two replies, 1 s when on time; Locust marks a worker missing after 10 missed)."""

from __future__ import annotations

import argparse
import json
import os
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.harness import read_rows
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent
USERS_PER_WORKER = 4
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def locust(role: list[str], url: str, rows_per_user: float, in_flight: int, out: Path) -> list[str]:
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "benchmarks/master_rows_user.py",
        "-H",
        url,
        "--bench-rows-per-s",
        str(rows_per_user),
        "--bench-in-flight",
        str(in_flight),
        "--bench-out",
        str(out),
        "-L",
        "WARNING",
        *role,
    ]


def measure(url: str, rate: int, workers: int, seconds: int, in_flight: int, out: Path, profile: bool) -> dict:
    """One master and its workers at ``rate`` rows/s in all, for ``seconds`` of hold (the master under cProfile
    with ``profile``: its top functions are printed)."""
    port, users = free_port(), workers * USERS_PER_WORKER
    out.mkdir(parents=True)
    master_cmd = locust(
        ["--master", "--headless", "--only-summary", "--master-bind-host", "127.0.0.1", "--master-bind-port"]
        + [str(port), "--expect-workers", str(workers), "-u", str(users), "-r", str(users), "-t", f"{seconds}s"]
        + ["--results-dir", str(out / "run")],
        url,
        rate / users,
        in_flight,
        out,
    )
    if profile:
        master_cmd[1:1] = ["-m", "cProfile", "-o", str(out / "master.prof")]
    master = subprocess.Popen(master_cmd, cwd=REPO)
    worker_role = ["--worker", "--master-host", "127.0.0.1", "--master-port", str(port)]
    worker_cmd = locust(worker_role, url, rate / users, in_flight, out)
    procs = [subprocess.Popen(worker_cmd, cwd=REPO) for _ in range(workers)]
    deadline = time.monotonic() + 120
    while not (out / "run" / "requests.csv").exists() and master.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)  # the run has started: start-up (imports, connections) left out of the CPU
    started = time.monotonic()
    cpu_before = process_cpu_s(master.pid)
    cpu_after = cpu_before
    while master.poll() is None and time.monotonic() - started < seconds + 120:
        cpu_after = process_cpu_s(master.pid)  # the last reading before it exits
        time.sleep(0.5)
    wall = time.monotonic() - started
    master.wait(timeout=60)
    for proc in procs:
        proc.wait(timeout=60)
    if profile:
        pstats.Stats(str(out / "master.prof")).sort_stats("tottime").print_stats(25)
    rows = read_rows(out / "run" / "requests.csv")
    health = [r for r in read_rows(out / "run" / "client_health.csv") if r["worker"] == "master"]
    gaps = [g for f in out.glob("worker-*.json") for g in json.loads(f.read_text())["heartbeat_gaps_s"]]
    run = json.loads((out / "run" / "run.json").read_text())
    return {
        "rate": rate,
        "rows": len(rows),
        "rows_per_s": len(rows) / seconds,
        "master_cpu_percent": 100 * (cpu_after - cpu_before) / wall,
        "master_cpu_us_per_row": 1e6 * (cpu_after - cpu_before) / max(len(rows), 1),
        "master_cpu_health_max": max((float(r["cpu_percent"]) for r in health), default=float("nan")),
        "master_loop_lag_max_ms": max((float(r["loop_lag_ms"]) for r in health), default=float("nan")),
        "heartbeat_gap_max_s": max(gaps, default=float("nan")),
        "lost_workers": len(run.get("lost_workers", [])),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", default="5000,10000,20000,40000")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--in-flight", type=int, default=5000)
    parser.add_argument("--profile", action="store_true", help="run the master under cProfile (slower)")
    args = parser.parse_args()
    print(
        "rows/s asked | rows written/s | master CPU µs per row (rows/s per core) | master CPU (/proc, health max) | "
        "loop lag max | heartbeat gap max | lost | load average"
    )
    with tempfile.TemporaryDirectory() as tmp, start_simulator("--profile", "cpu-tiny") as sim:
        os.sched_setaffinity(sim.proc.pid, {1})
        for rate in map(int, args.rates.split(",")):
            r = measure(sim.url, rate, args.workers, args.seconds, args.in_flight, Path(tmp) / str(rate), args.profile)
            print(
                f"{rate:,} | {r['rows_per_s']:,.0f} ({r['rows']:,} rows) | {r['master_cpu_us_per_row']:.1f} "
                f"({1e6 / r['master_cpu_us_per_row']:,.0f}) | {r['master_cpu_percent']:.0f} %, "
                f"{r['master_cpu_health_max']:.0f} % | {r['master_loop_lag_max_ms']:.0f} ms | "
                f"{r['heartbeat_gap_max_s']:.2f} s | {r['lost_workers']} | {os.getloadavg()[0]:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
