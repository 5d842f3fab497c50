"""Benchmark: analyse a run folder of one million request rows (the whole report: stats, plots, md, html, json).

    .venv/bin/python benchmarks/analysis_rows.py [--rows 1000000] [--dir /tmp/analysis-bench]

The run is synthetic: the seven levels of the MI325X sweep (10 .. 1000 users), 4 workers whose rows are interleaved,
lognormal latencies, 1 % failures and an ITL histogram. Writing the folder is not timed; reading it is.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for `analysis`

from analysis.levels import level_stats, level_windows  # noqa: E402
from analysis.load import load_run  # noqa: E402
from analysis.report import analyse  # noqa: E402
from analysis.synthetic import request_rows, step_levels, write_run  # noqa: E402

USERS = [10, 50, 100, 200, 500, 750, 1000]
HOLD_S = 600.0


def make_run(folder: Path, total_rows: int) -> Path:
    """A run folder with ``total_rows`` request rows spread over the levels like a saturating server."""
    rng = np.random.default_rng(1)
    levels = step_levels(USERS, HOLD_S, ramp_s=30.0)
    weights = np.minimum(USERS, 100) / np.minimum(USERS, 100).sum()
    parts = []
    for (users, _, hold_start, _), share in zip(levels, weights, strict=True):
        count = int(total_rows * share)
        ends = np.sort(rng.uniform(hold_start - 20.0, hold_start + HOLD_S + 20.0, count))
        e2e = rng.lognormal(np.log(5.0 + users / 100), 0.3, count)
        ok = (rng.random(count) > 0.01).astype(int)
        level_rows = request_rows(users, ends, e2e, ok=ok)
        level_rows["worker"] = rng.choice(["w1", "w2", "w3", "w4"], count)
        parts.append(level_rows)
    rows = pd.concat(parts, ignore_index=True)
    rows = rows.iloc[np.argsort(rows["end_time"].to_numpy() + rng.uniform(0, 2.0, len(rows)))]  # batches interleave
    itl = [
        (users, float(ms), int(n)) for users in USERS for ms, n in zip(range(20, 60), range(1000, 1040), strict=True)
    ]
    return write_run(folder, rows, step_levels(USERS, HOLD_S, ramp_s=30.0), itl, {"model": "bench", "complete": True})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="where to write the run (default: a temporary folder)")
    args = parser.parse_args()
    root = args.dir or Path(tempfile.mkdtemp(prefix="analysis-bench-"))
    run_dir = make_run(root / "run", args.rows)
    print(f"{args.rows:,} rows in {run_dir} ({(run_dir / 'requests.csv').stat().st_size / 1e6:.0f} MB)")

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
