"""``python -m analysis``: the command line of ``vllm_stress.analysis.report.analyse``; ``python -m analysis compare ...`` and
``python -m analysis history ...`` are ``vllm_stress.analysis.compare`` and ``vllm_stress.analysis.store`` (a run folder named ``compare`` or
``history`` is then given as ``./compare``)."""

from __future__ import annotations

import argparse
import sys

from vllm_stress.analysis import compare, store, vllm_json
from vllm_stress.analysis.levels import LATENCY_METRICS
from vllm_stress.analysis.load import AnalysisError
from vllm_stress.analysis.report import ANY_LABEL, analyse
from vllm_stress.analysis.traffic import DEFAULT_WINDOW_S
from vllm_stress.core.slo import request_slos

DESCRIPTION = """\
Analyse vllm-stress run folders (requests.csv, levels.csv, itl_histogram.csv, run.json, locust_*.csv) and write
report.md, report.html (self-contained), PNG plots and summary.json into OUT.

Runs that share a label are repeats of one config (means, standard deviations and 95 % confidence intervals per
level); different labels are compared side by side. Without --label a run is labelled from its run.json (model and
scenario), so repeats of one scenario group by themselves; give --label to separate configs that share a model.
"""
EPILOG = """\
examples:
  python -m analysis results/demo/run-1 --out report/ --gpus 8
  python -m analysis runs/q1 runs/q2 runs/q3 --label qwen --out report/ --slo ttft=2s,tpot=50ms
  python -m analysis --label qwen=runs/q1,runs/q2 --label kimi=runs/k1 --gpus 8 --gpus kimi=4 \\
      --scaling 10:200 --out compare/
  python -m analysis compare BASELINE CANDIDATE [--fail-on 'output_tok_s<-5%'] [--out DIR]   (see compare --help)
  python -m analysis history [--db PATH]                                                      (the results store)
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m analysis",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dirs", nargs="*", metavar="DIR", help="run folder (one per run; repeats and configs mixed)")
    parser.add_argument("--out", required=True, metavar="OUT", help="output folder (created; files overwritten)")
    parser.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="NAME[=DIR,...]",
        help="NAME alone labels every DIR; NAME=DIR[,DIR...] labels those folders (and adds them). Repeatable.",
    )
    parser.add_argument(
        "--gpus",
        action="append",
        default=[],
        metavar="N|NAME=N",
        help="GPUs serving a config, for per-GPU throughput: N for every config or NAME=N for one. Repeatable.",
    )
    parser.add_argument(
        "--slo",
        metavar="METRIC=LIMIT,...",
        help="goodput limits per request, e.g. ttft=2s,tpot=50ms,e2e=30s (metrics ttft, tpot, e2e; units s or ms; "
        "a bare number is milliseconds, as in vllm bench serve --goodput)",
    )
    parser.add_argument(
        "--scaling",
        metavar="LOW:HIGH",
        help="levels of the scaling factor, e.g. 10:200 (default: smallest and largest level)",
    )
    parser.add_argument(
        "--window",
        type=float,
        default=DEFAULT_WINDOW_S,
        metavar="SECONDS",
        help=f"window of the per-window tables of open-loop runs and trace replays (default {DEFAULT_WINDOW_S:g})",
    )
    parser.add_argument(
        "--db",
        metavar="PATH",
        help=f"append the runs to this results store (SQLite; default: ${store.DB_ENV}, none when unset)",
    )
    parser.add_argument(
        "--export-vllm",
        metavar="DIR",
        help="also write each level of each run as a vllm bench serve --save-result JSON into DIR",
    )
    return parser.parse_args(argv)


def parse_labels(values: list[str], dirs: list[str]) -> tuple[list[str], str | dict[str, str] | None]:
    """All dirs (positional first, then those named in --label) and the labels argument of ``analyse``."""
    plain = [value for value in values if "=" not in value]
    if len(plain) > 1 or (plain and len(plain) != len(values)):
        raise AnalysisError("--label: give either one NAME for all folders or NAME=DIR[,DIR...] options")
    if plain:
        return dirs, plain[0]
    by_dir = {}
    for value in values:
        name, _, folders = value.partition("=")
        for folder in filter(None, folders.split(",")):
            by_dir[folder] = name
    return dirs + [d for d in by_dir if d not in dirs], by_dir or None


def parse_gpus(values: list[str]) -> int | dict[str, int] | None:
    """--gpus N or NAME=N options -> the gpus argument of ``analyse`` (a plain N becomes the "*" entry)."""
    per_label = {}
    for value in values:
        name, _, count = value.rpartition("=")
        if not count.isdigit() or int(count) < 1:
            raise AnalysisError(f"--gpus: {value!r} is not N or NAME=N with N a positive integer")
        per_label[name or ANY_LABEL] = int(count)
    return per_label or None


def parse_slo(text: str | None) -> dict[str, float] | None:
    """'ttft=2s,tpot=50' -> {"ttft": 2.0, "tpot": 0.05}: per-request limits in seconds (vllm_stress.core.slo)."""
    if not text:
        return None
    try:
        return {slo.name: slo.limit for slo in request_slos(text, LATENCY_METRICS)}
    except ValueError as error:
        raise AnalysisError(str(error)) from None


def parse_scaling(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    low, sep, high = text.partition(":")
    if not sep or not low.isdigit() or not high.isdigit():
        raise AnalysisError(f"--scaling: {text!r} is not LOW:HIGH (e.g. 10:200)")
    return int(low), int(high)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        return compare.main(argv[1:])
    if argv[:1] == ["history"]:
        return store.main(argv[1:])
    args = parse_args(argv)
    try:
        if not args.window > 0:
            raise AnalysisError(f"--window must be more than 0 seconds, got {args.window:g}")
        dirs, labels = parse_labels(args.label, args.dirs)
        summary = analyse(
            dirs,
            args.out,
            labels=labels,
            gpus=parse_gpus(args.gpus),
            slo=parse_slo(args.slo),
            scaling=parse_scaling(args.scaling),
            db=args.db,
            window_s=args.window,
        )
        if args.export_vllm:
            vllm_json.export(summary, args.export_vllm)
    except AnalysisError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    runs = summary["runs"]
    print(f"wrote {args.out}/report.md, report.html, summary.json ({runs} run{'s' if runs > 1 else ''})")
    if summary.get("store_ids"):
        print(f"recorded in the results store as {', '.join(f'db:{i}' for i in summary['store_ids'])}")
    return 0
