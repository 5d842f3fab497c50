"""The command lines: ``python -m analysis`` (run folders to a report), ``python -m analysis compare`` (the
regression gate) and ``python -m analysis history`` (the results store); a run folder named ``compare`` or ``history``
is then given as ``./compare``."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from vllm_stress.analysis.compare.compare import METRICS, SIDES, Comparison, Pricing, compare, parse_fail_on
from vllm_stress.analysis.compare.compare_report import (
    COMPARE_HTML,
    COMPARE_JSON,
    COMPARE_MD,
    cost_line,
    verdict_line,
    write_report,
)
from vllm_stress.analysis.features.spec_counters import ACCEPTED_LENGTH, crossover_text
from vllm_stress.analysis.features.traces import DEFAULT_WINDOW_S
from vllm_stress.analysis.figures import FIGURES_ENV
from vllm_stress.analysis.io import store, vllm_json
from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.analysis.measures import LATENCY_METRICS
from vllm_stress.analysis.report.pipeline import ANY_LABEL, analyse, for_label
from vllm_stress.core.slo import HELP as SLO_HELP
from vllm_stress.core.slo import request_slos

Value = TypeVar("Value", int, float)

DESCRIPTION = """\
Analyse vllm-stress run folders (requests.csv, levels.csv, itl_histogram.csv, run.json, locust_*.csv) and write
report.md, report.html (self-contained), PNG plots and summary.json into OUT.

Runs that share a label are repeats of one config (means, standard deviations and 95 % confidence intervals per
level); different labels are compared side by side. Without --label a run is labelled from its run.json (model and
scenario), so repeats of one scenario group by themselves; give --label to separate configs that share a model.
"""
EPILOG = """\
examples:
  %(prog)s results/demo/run-1 --out report/ --gpus 8 --gpu-hour-price 2.50
  %(prog)s runs/q1 runs/q2 runs/q3 --label qwen --out report/ --slo ttft=2s,tpot=50ms
  %(prog)s --label qwen=runs/q1,runs/q2 --label kimi=runs/k1 --gpus 8 --gpus kimi=4 \\
      --scaling 10:200 --out compare/
  %(prog)s compare BASELINE CANDIDATE [--fail-on 'output_tok_s<-5%%'] [--out DIR]   (see compare --help)
  %(prog)s history [--db PATH]                                                      (the results store)
"""
PROG = "python -m analysis"  # the installed command names it "vllm-stress analyse"


def build_parser(prog: str = PROG) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
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
        "--gpu-hour-price",
        action="append",
        default=[],
        metavar="USD|NAME=USD",
        help="$ per GPU-hour of a config (with --gpus), for the cost per million output and total tokens at each "
        "level and at the peak: USD for every config or NAME=USD for one. Repeatable.",
    )
    parser.add_argument(
        "--slo",
        metavar="NAME=LIMIT,...",
        help=f"goodput limits per request (metrics {', '.join(LATENCY_METRICS)}; ttft_p99=2000 reads as ttft=2000): "
        + SLO_HELP,
    )
    parser.add_argument(
        "--canaries-in-figures",
        action="store_true",
        help="count the correctness canaries' requests (--canary-share) in every throughput and latency figure, as "
        "a run made with --canaries-in-figures does (by default they are kept apart, in their own section)",
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
        "--no-figures",
        dest="figures",
        action="store_false",
        default=None,
        help=f"write the report without its PNG figures, about a second less per report (default: drawn, unless "
        f"${FIGURES_ENV} is 0)",
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
    return parser


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


def per_label(
    values: list[str], flag: str, parse: Callable[[str], Value | None], wanted: str
) -> dict[str, Value] | None:
    """VALUE or NAME=VALUE options -> {name: value} (a plain VALUE becomes the "*" entry), each VALUE read by
    ``parse`` (None: not a valid VALUE, an AnalysisError naming ``wanted``)."""
    values_by_label: dict[str, Value] = {}
    for option in values:
        name, _, text = option.rpartition("=")
        value = parse(text)
        if value is None:
            raise AnalysisError(f"{flag}: {option!r} is not {wanted}")
        values_by_label[name or ANY_LABEL] = value
    return values_by_label or None


def gpu_count(text: str) -> int | None:
    """'4' -> 4; None for what is not a positive integer."""
    return int(text) if text.isdigit() and int(text) >= 1 else None


def gpu_hour_price(text: str) -> float | None:
    """'2.5' or '$2.5' -> 2.5; None for what is not a positive finite number."""
    try:
        price = float(text.removeprefix("$"))
    except ValueError:
        return None
    return price if 0 < price < math.inf else None


def parse_gpus(values: list[str]) -> dict[str, int] | None:
    """--gpus N or NAME=N options -> the gpus argument of ``analyse``."""
    return per_label(values, "--gpus", gpu_count, "N or NAME=N with N a positive integer")


def parse_prices(values: list[str]) -> dict[str, float] | None:
    """--gpu-hour-price USD or NAME=USD options -> the gpu_hour_price argument of ``analyse``."""
    return per_label(values, "--gpu-hour-price", gpu_hour_price, "USD or NAME=USD with USD a positive number")


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


def main(argv: list[str] | None = None, prog: str = PROG) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["compare"]:
        return compare_main(argv[1:], f"{prog} compare")
    if argv[:1] == ["history"]:
        return history_main(argv[1:], f"{prog} history")
    args = build_parser(prog).parse_args(argv)
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
            gpu_hour_price=parse_prices(args.gpu_hour_price),
            canaries_in_figures=args.canaries_in_figures or None,
            figures=args.figures,
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


COMPARE_DESCRIPTION = """\
``%(prog)s BASELINE CANDIDATE``: per level, how every headline metric changed, whether the
change is outside the noise, and a regression gate for CI (``--fail-on``)."""
COMPARE_EPILOG = """\
sources: a run folder, a vllm bench serve --save-result JSON file (or a vllm bench sweep folder of them), or db:ID
  (a run of the results store)
examples:
  %(prog)s results/a/run-1 results/b/run-1
  %(prog)s --baseline results/a/run-* --candidate results/b/run-* --fail-on 'output_tok_s<-5%%'
  %(prog)s results/a/run-1,results/a/run-2 vllm-bench.json --out cmp/
  %(prog)s results/a/run-1 results/b/run-1 --gpus 8 --gpus candidate=4 --gpu-hour-price 2.50
exit status: 0 no regression, 1 a --fail-on limit crossed outside the noise at a steady level, 2 bad input
"""


def build_compare_parser(prog: str = f"{PROG} compare") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=COMPARE_DESCRIPTION,
        epilog=COMPARE_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "sides",
        nargs="*",
        metavar="BASELINE CANDIDATE",
        help="the two sides, each SOURCE[,SOURCE...] (several sources are repeats)",
    )
    parser.add_argument(
        "--baseline",
        nargs="+",
        action="extend",
        default=[],
        metavar="SOURCE",
        help="baseline sources (instead of the positional form; repeatable, globs welcome)",
    )
    parser.add_argument(
        "--candidate", nargs="+", action="extend", default=[], metavar="SOURCE", help="candidate sources"
    )
    parser.add_argument(
        "--fail-on", metavar="LIMITS", help="e.g. 'output_tok_s<-5%%,ttft_p99>+10%%'; metrics: " + ", ".join(METRICS)
    )
    parser.add_argument("--out", metavar="DIR", help="write compare.md, compare.html, compare.json and plots here")
    parser.add_argument("--db", metavar="PATH", help="results store for db:ID sources (default: $VLLM_STRESS_DB)")
    parser.add_argument(
        "--class",
        dest="traffic_class",
        default="",
        metavar="NAME",
        help="compare one traffic class's requests (--traffic-class) of run folders",
    )
    parser.add_argument(
        "--gpus",
        action="append",
        default=[],
        metavar="N|SIDE=N",
        help="GPUs serving a side, for the cost: N for both or baseline=N / candidate=N. Repeatable.",
    )
    parser.add_argument(
        "--gpu-hour-price",
        action="append",
        default=[],
        metavar="USD|SIDE=USD",
        help="$ per GPU-hour of a side (with --gpus), for the cost per million output tokens at each level on both "
        "sides and its change: USD for both or baseline=USD / candidate=USD. Repeatable.",
    )
    return parser


def parse_pricing(gpus: list[str], prices: list[str]) -> dict[str, Pricing] | None:
    """compare's --gpus and --gpu-hour-price (the analysis' grammar, the names being the sides) -> each side's
    Pricing; None without a price, AnalysisError when a side lacks its price or GPUs or a name is not a side."""
    per_side_gpus, per_side_prices = parse_gpus(gpus), parse_prices(prices)
    unknown = sorted((set(per_side_gpus or {}) | set(per_side_prices or {})) - {ANY_LABEL, *SIDES})
    if unknown:
        raise AnalysisError(f"--gpus, --gpu-hour-price: {', '.join(unknown)} is not a side (baseline, candidate)")
    if not per_side_prices:
        return None
    pricing = {}
    for side in SIDES:
        count, price = for_label(per_side_gpus, side), for_label(per_side_prices, side)
        if count is None or price is None:
            raise AnalysisError(f"--gpu-hour-price: give the price and the GPUs (--gpus) of the {side} too")
        pricing[side] = Pricing(int(count), float(price))
    return pricing


def sides_of(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The baseline and candidate sources, from the positional or the flag form."""
    if args.sides and (args.baseline or args.candidate):
        raise AnalysisError("give the sides either as BASELINE CANDIDATE or with --baseline/--candidate, not both")
    if args.sides:
        if len(args.sides) != 2:
            raise AnalysisError(f"expected BASELINE CANDIDATE, got {len(args.sides)} argument(s)")
        baseline, candidate = ([s for s in side.split(",") if s] for side in args.sides)
        if not (baseline and candidate):
            raise AnalysisError("a side names no source")
        return baseline, candidate
    if not args.baseline or not args.candidate:
        raise AnalysisError("give BASELINE CANDIDATE (or --baseline ... --candidate ...)")
    return args.baseline, args.candidate


def compare_main(argv: list[str], prog: str = f"{PROG} compare") -> int:
    """``python -m analysis compare``: 0 no regression, 1 a regression, 2 bad input."""
    args = build_compare_parser(prog).parse_args(argv)
    try:
        baseline, candidate = sides_of(args)
        pricing = parse_pricing(args.gpus, args.gpu_hour_price)
        db = args.db or store.default_db()
        comparison = compare(baseline, candidate, parse_fail_on(args.fail_on), db, pricing, args.traffic_class)
        if args.out:
            write_report(comparison, Path(args.out))
    except AnalysisError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print_comparison(comparison, args.out)
    return 1 if comparison.regressions else 0


def print_comparison(comparison: Comparison, out: str | None) -> None:
    """Twin vs real first, the servers when they differ, the cost at each level when priced, each regression, and a
    one-line count."""
    if comparison.twin_line():
        print(f"{comparison.twin_line()}: a twin's figures are predicted, not measured")
    if comparison.servers_differ:
        for side in SIDES:
            print(f"{side} server: {' / '.join(comparison.side(side).servers) or 'unknown'}")
    for cost in comparison.costs:
        print(f"cost: {cost_line(cost)}")
    for diff in comparison.regressions:
        print(f"regression: {verdict_line(diff)}")
    if spec := crossover_text(comparison.differences, comparison.candidate.levels.get(ACCEPTED_LENGTH)):
        print(spec)
    ungated = f", {len(comparison.ungated)} not steady (ungated)" if comparison.ungated else ""
    written = f"; wrote {out}/{COMPARE_MD}, {COMPARE_HTML}, {COMPARE_JSON}" if out else ""
    print(
        f"compared {len(comparison.compared_users)} level(s){ungated}: "
        f"{len(comparison.regressions)} regression(s){written}"
    )


def build_history_parser(prog: str = f"{PROG} history") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="List the runs of the results store, newest first (ids as db:ID, for the compare command).",
    )
    parser.add_argument("--db", metavar="PATH", help=f"the store (default: ${store.DB_ENV})")
    parser.add_argument("--model", default="", help="only runs whose model contains this")
    parser.add_argument("--scenario", default="", help="only runs whose scenario contains this")
    parser.add_argument("--label", default="", help="only runs whose config label contains this")
    parser.add_argument("--limit", type=int, default=50, help="at most this many runs (default: %(default)s)")
    return parser


def history_main(argv: list[str], prog: str = f"{PROG} history") -> int:
    """``python -m analysis history``: the stored runs, one a line (exit 2 without a store)."""
    args = build_history_parser(prog).parse_args(argv)
    db = args.db or store.default_db()
    if not db or not Path(db).is_file():
        print(
            f"error: no results store {'at ' + db if db else f'given (--db PATH or {store.DB_ENV})'}", file=sys.stderr
        )
        return 2
    try:
        runs = store.history(db, args.model, args.scenario, args.label, args.limit)
    except AnalysisError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print("\t".join(store.HISTORY_COLUMNS))
    for run in runs:
        print("\t".join("-" if run[key] is None else str(run[key]) for key in store.HISTORY_COLUMNS))
    return 0
