"""Benchmark: analyse a run folder of one million request rows (the whole report: stats, plots, md, html, json).

    .venv/bin/python benchmarks/analysis_rows.py [--rows 1000000] [--dir /tmp/analysis-bench]

The run is synthetic: the seven levels of the MI325X sweep (10 .. 1000 users), each a closed loop (every user sends
back-to-back requests from its ramp start until its hold ends, so requests straddle the window edges) against a
server that saturates at 100 users (the median e2e grows with the users above that), lognormal latencies, 1 %
failures, 4 workers whose rows are interleaved and an ITL histogram. Writing the folder is not timed; reading it is.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.analysis.levels import level_stats, level_windows
from vllm_stress.analysis.report.pipeline import analyse

USERS = [10, 50, 100, 200, 500, 750, 1000]
HOLD_S = 600.0
RAMP_S = 30.0
SIGMA = 0.3  # of the lognormal e2e


def make_run(folder: Path, total_rows: int) -> tuple[Path, int]:
    """A run folder with about ``total_rows`` request rows (closed loops of ``users`` users each), and its rows."""
    rng = np.random.default_rng(1)
    levels = step_levels(USERS, HOLD_S, ramp_s=RAMP_S)
    slowdown = np.maximum(1.0, np.array(USERS) / 100)  # median e2e relative to the unsaturated one
    mean_factor = np.exp(SIGMA**2 / 2)  # lognormal mean / median
    base_s = (RAMP_S + HOLD_S) * (np.array(USERS) / slowdown).sum() / (total_rows * mean_factor)
    parts = []
    for (users, ramp_start, _, hold_end), factor in zip(levels, slowdown, strict=True):
        median_s = base_s * factor
        per_user = int(np.ceil(1.2 * (RAMP_S + HOLD_S) / median_s)) + 5  # one cycle covers the level
        e2e = rng.lognormal(np.log(median_s), SIGMA, (users, per_user))
        ok = (rng.random((users, per_user)) > 0.01).astype(int)
        # each user's cycle is its whole level; spread its first start over about one request, not one cycle
        level_rows = closed_loop_rows(users, ramp_start, hold_end, e2e, ok=ok, spread=1 / per_user)
        level_rows["worker"] = rng.choice(["w1", "w2", "w3", "w4"], len(level_rows))
        parts.append(level_rows)
    rows = pd.concat(parts, ignore_index=True)
    rows = rows.iloc[np.argsort(rows["end_time"].to_numpy() + rng.uniform(0, 2.0, len(rows)))]  # batches interleave
    itl = [
        (users, float(ms), int(n)) for users in USERS for ms, n in zip(range(20, 60), range(1000, 1040), strict=True)
    ]
    return write_run(folder, rows, levels, itl, {"model": "bench", "complete": True}), len(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the run (default: a temporary folder)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="analysis-bench-"))
    run_dir, rows = make_run(root / "run", args.rows)
    print(f"{rows:,} rows in {run_dir} ({(run_dir / 'requests.csv').stat().st_size / 1e6:.0f} MB)")

    started = time.perf_counter()
    run = load_run(run_dir)
    loaded = time.perf_counter()
    windows, _ = level_windows(run)
    level_stats(run, windows)
    computed = time.perf_counter()
    summary = analyse([run_dir], root / "report")
    finished = time.perf_counter()
    print(f"load {loaded - started:.2f} s, level statistics {computed - loaded:.2f} s")
    print(f"analyse() end to end (load, stats, 4 plots, report.md/html, summary.json): {finished - computed:.2f} s")
    print(f"peak {summary['peak']['output_tokens_per_s']:,.0f} output tok/s at {summary['peak']['users']} users")


if __name__ == "__main__":
    main()
