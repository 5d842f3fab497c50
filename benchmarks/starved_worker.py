"""Does the report say when a load generator read too late? One worker starved on purpose, levels up to 1,000 streams.

    .venv/bin/python -m benchmarks.starved_worker [--burners 2] [--levels 1000,300,100] [--out results/starved]
    .venv/bin/python -m benchmarks.starved_worker --burners 0 --cpu-percent 5 --starve-for 20 --levels 1000,300

The simulator (``cpu-tiny``, engine steps of at least 50 ms) and the Locust master run on core 0; the one worker runs
on core 1. From ``--burn-after`` seconds on (once the first level's users run: a worker starved while it starts 1,000
users misses its heartbeats for 10 s and is dropped) it is starved: ``--burners`` processes that spin (``while True:
pass``) pinned to its core give it about 1 / (burners + 1) of it, and ``--cpu-percent`` caps it at that share of a
core (a cpu cgroup of its own; root). ``--starve-for`` ends the starving after that many seconds, so that the levels
after it run unstarved; without it the levels go down, each held starved. The step ramp holds each level
``--step-time`` seconds; the run is then analysed (``python -m analysis``) and each level's read-behind p99
(``client_read_behind_p99_ms``), e2e p50, the worker's CPU and event-loop lag and the level's bound are printed.
``--burners 0`` alone is the same run unstarved.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.client_streams import pinned
from benchmarks.harness import chat_locust
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent
BURNER = "while True: pass"


def locust(url: str, args, role: list[str]) -> list[str]:
    return [*chat_locust(url, args.output_tokens, "locustfiles/chat.py,scenarios/shape.py"), *role]


def run(args, out: Path) -> None:
    port = str(free_port())
    master_role = ["--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", port, "--expect-workers", "1"]
    master_role += ["--levels", args.levels, "--step-time", str(args.step_time), "--warmup", "10"]
    master_role += ["--ramp-time", "10", "--cooldown", "5", "--results-dir", str(out / "run"), "--overwrite"]
    sim_args = ["--profile", "cpu-tiny", "--max-num-seqs", "2048", "--set", "t_fixed=0.05", "--set", "jitter=0"]
    with start_simulator(*sim_args) as sim, open(out / "locust.log", "w") as log:
        master = subprocess.Popen(pinned(0, locust(sim.url, args, master_role)), cwd=REPO, stdout=log, stderr=log)
        worker_role = ["--worker", "--master-port", port]
        worker = subprocess.Popen(pinned(1, locust(sim.url, args, worker_role)), cwd=REPO, stdout=log, stderr=log)
        burners: list[subprocess.Popen] = []
        group: Path | None = None
        try:
            if (os.cpu_count() or 1) > 1:
                os.sched_setaffinity(sim.proc.pid, {0})
            time.sleep(args.burn_after)  # a worker starved while it starts users misses its heartbeats
            burners = [subprocess.Popen(pinned(1, [sys.executable, "-c", BURNER])) for _ in range(args.burners)]
            if args.cpu_percent:
                group = cpu_limited(worker.pid, args.cpu_percent)
            if args.starve_for:  # then the worker has its core again: the levels after it are the unstarved ones
                time.sleep(args.starve_for)
                for burner in burners:
                    burner.terminate()
                if group:
                    cpu_unlimited(group)
            master.wait(timeout=3600)
            worker.wait(timeout=60)
        finally:
            for proc in (*burners, worker, master):
                proc.terminate()
                proc.wait(timeout=60)
            if group:
                group.rmdir()  # empty once the worker has exited


def cpu_limited(pid: int, percent: float) -> Path:
    """Move process ``pid`` into a cpu cgroup of its own (version 1's cpu controller, else version 2) that lets it
    run ``percent`` % of one core; returns the group's folder."""
    period_us = 100_000
    quota_us = round(period_us * percent / 100)
    v1 = Path("/sys/fs/cgroup/cpu")
    if (v1 / "cpu.cfs_quota_us").is_file():
        group = v1 / f"vllm-stress-starved-{pid}"
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text(str(period_us))
        (group / "cpu.cfs_quota_us").write_text(str(quota_us))
    else:
        group = Path("/sys/fs/cgroup") / f"vllm-stress-starved-{pid}"
        group.mkdir()
        (group / "cpu.max").write_text(f"{quota_us} {period_us}")
    (group / "cgroup.procs").write_text(str(pid))
    return group


def cpu_unlimited(group: Path) -> None:
    if (group / "cpu.cfs_quota_us").is_file():
        (group / "cpu.cfs_quota_us").write_text("-1")
    else:
        (group / "cpu.max").write_text("max")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--burners", type=int, default=2, help="spinning processes on the worker's core")
    parser.add_argument("--levels", default="1000,300,100", help="highest first: its users start before the burners")
    parser.add_argument(
        "--cpu-percent",
        type=float,
        default=0,
        help="also cap the worker at this share of one core (a cpu cgroup of its own, as root) from --burn-after on",
    )
    parser.add_argument("--burn-after", type=float, default=30.0, help="seconds from the start to the starving")
    parser.add_argument("--starve-for", type=float, default=0, help="seconds the starving lasts (default: to the end)")
    parser.add_argument("--step-time", type=float, default=30.0, help="hold of each level, seconds")
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--out", default="results/starved")
    args = parser.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print("load before:", os.getloadavg(), flush=True)
    run(args, out)
    subprocess.run([sys.executable, "-m", "analysis", str(out / "run"), "--out", str(out / "report")], cwd=REPO)
    summary = json.loads((out / "report" / "summary.json").read_text())
    cap = f", the worker capped at {args.cpu_percent:g} % of a core" if args.cpu_percent else ""
    print(f"{args.burners} burners on the worker's core{cap}; load after: {os.getloadavg()}")
    print(
        "| users | read-behind p99 (ms) | e2e p50 (s) | share | worker CPU % | loop lag (ms) | output tok/s | bound |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for level in summary["levels"]:
        behind, e2e = level["client_read_behind_p99_ms"], level["e2e_p50_s"]
        share = f"{behind / 1000 / e2e:.1%}" if behind is not None and e2e else "-"
        print(
            f"| {level['users']} | {behind} | {e2e and round(e2e, 2)} | {share} | {level['client_cpu_max_percent']} | "
            f"{level['client_loop_lag_max_ms']} | {level['output_tokens_per_s'] and round(level['output_tokens_per_s'])} "
            f"| {level.get('bound') or ''} |"
        )


if __name__ == "__main__":
    main()
