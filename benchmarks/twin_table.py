"""The twin's fidelity table for benchmarks/twin.md: per case and level, output tok/s, TTFT p50 and TPOT p50 of the
measured runs and of the twin's runs (medians over the runs a glob matches, with their range), and the twin's error.
With --waves, per run folder and level instead: how the closed loop's requests bunch (for each request started in the
level's window, the others that started within 5 ms of it, on average) and the TTFT p10 / p50 / p90 this gives.

.venv/bin/python -m benchmarks.twin_table CASE=MEASURED_GLOB:TWIN_GLOB ...
e.g. p128='results/twin-real/round-*/real-p128/run-1':'results/twin-real/round-*/twin-p128/run-1'
.venv/bin/python -m benchmarks.twin_table --waves RUN_DIR ...
"""

from __future__ import annotations

import argparse
import glob
import statistics

import numpy as np

from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.levels import level_windows
from vllm_stress.analysis.report.pipeline import run_levels
from vllm_stress.core.metrics import percentile

WAVE_S = 0.005  # two requests started this close are in one wave

METRICS = {
    "output_tokens_per_s": ("output tok/s", 1.0),
    "ttft_p50_s": ("TTFT p50 ms", 1e3),
    "tpot_p50_s": ("TPOT p50 ms", 1e3),
}


def per_level(pattern: str) -> dict[int, dict[str, list[float]]]:
    """users -> metric -> the value of every run matching ``pattern`` (steady or not: the table says which)."""
    values: dict[int, dict[str, list[float]]] = {}
    for folder in sorted(glob.glob(pattern)):
        for level in run_levels(folder).to_dict("records"):  # the report's own levels
            slot = values.setdefault(int(level["users"]), {metric: [] for metric in [*METRICS, "steady"]})
            for metric in METRICS:
                slot[metric].append(float(level[metric]) * METRICS[metric][1])
            slot["steady"].append(float(bool(level["steady"])))
    return values


def spread(values: list[float]) -> str:
    median = statistics.median(values)
    if len(values) < 2:
        return f"{median:.4g}"
    return f"{median:.4g} ({min(values):.4g}–{max(values):.4g})"


def rows(case: str, measured: str, twin: str) -> list[str]:
    real, predicted = per_level(measured), per_level(twin)
    lines = []
    for users in sorted(set(real) & set(predicted)):
        steady = f"{int(sum(real[users]['steady']))}/{len(real[users]['steady'])}"
        cells = []
        for metric in METRICS:
            a, b = statistics.median(real[users][metric]), statistics.median(predicted[users][metric])
            cells.append(f"{spread(real[users][metric])} | {spread(predicted[users][metric])} | {b / a - 1:+.0%}")
        lines.append(f"| {case} | {users} | {steady} | " + " | ".join(cells) + " |")
    return lines


def waves(folder: str) -> list[str]:
    """Per level of one run: the requests started in its window, the others started within WAVE_S of each (mean),
    and their TTFT p10 / p50 / p90 in ms."""
    run = load_run(folder)
    windows, _ = level_windows(run)
    succeeded = run.requests[run.requests["ok"] == 1]
    lines = []
    for window in windows.itertuples():
        level = succeeded[succeeded["start_time"].between(window.start, window.end)]
        starts = level["start_time"].to_numpy()
        together = (np.abs(starts[:, None] - starts[None, :]) < WAVE_S).sum(axis=1) - 1
        ttft = level["ttft_s"].to_numpy(float)
        lines.append(
            f"| {folder} | {window.users} | {len(level)} | {together.mean():.2f} | "
            + " / ".join(f"{percentile(ttft, q) * 1e3:.1f}" for q in (10, 50, 90))
            + " |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("cases", nargs="+", metavar="CASE=MEASURED_GLOB:TWIN_GLOB (or RUN_DIR with --waves)")
    parser.add_argument("--waves", action="store_true", help="how each run's requests bunch into waves, per level")
    args = parser.parse_args()
    if args.waves:
        print("| run | users | requests | others started within 5 ms | TTFT p10 / p50 / p90 ms |")
        print("|---|---|---|---|---|")
        print("\n".join(line for folder in args.cases for line in waves(folder)))
        return
    header = " | ".join(f"{name}: measured | twin | error" for name, _ in METRICS.values())
    print(f"| case | users | steady (measured) | {header} |")
    print("|---|---|---|" + "---|---|---|" * len(METRICS))
    for case in args.cases:
        name, _, globs = case.partition("=")
        measured, _, twin = globs.partition(":")
        print("\n".join(rows(name, measured, twin)))


if __name__ == "__main__":
    main()
