"""``python -m analysis compare BASELINE CANDIDATE``: per level, how every headline metric changed, whether the
change is outside the noise, and a regression gate for CI (``--fail-on``).

A side is one or more sources, all repeats of one configuration: run folders, ``vllm bench serve --save-result``
JSON files or folders of them (``vllm_stress.analysis.vllm_json``; the level is their ``max_concurrency``) or runs of the
results store (``db:ID``, ``vllm_stress.analysis.store``). The level figures are those of the analysis
(``vllm_stress.analysis.levels.level_stats``); a level's repeats are aggregated as in the report
(``vllm_stress.analysis.stats.aggregate_repeats``).

How a difference is judged: ``METHOD`` (the report prints it).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

import pandas as pd

from vllm_stress.analysis import stats, store, vllm_json
from vllm_stress.analysis.load import AnalysisError, read_meta
from vllm_stress.analysis.plots import plot_against_users
from vllm_stress.analysis.render import Bullets, Heading, Image, Paragraph, Table, to_html, to_markdown
from vllm_stress.analysis.report import run_levels
from vllm_stress.analysis.summary import to_json_types
from vllm_stress.core import schema
from vllm_stress.core.steady import RATE_TOLERANCE

# --fail-on name -> level field (vllm_stress.analysis.levels.LEVEL_FIELDS): the headline metrics compared
METRICS = {
    "output_tok_s": "output_tokens_per_s",
    "total_tok_s": "total_tokens_per_s",
    "req_s": "requests_per_s",
    "ttft_p50": "ttft_p50_s",
    "ttft_p99": "ttft_p99_s",
    "tpot_p50": "tpot_p50_s",
    "tpot_p99": "tpot_p99_s",
    "e2e_p50": "e2e_p50_s",
    "e2e_p99": "e2e_p99_s",
}
RATES = ("output_tok_s", "total_tok_s", "req_s")
SINGLE_RUN_MIN_EFFECT = RATE_TOLERANCE
STORE_PREFIX = "db:"
VERDICT_KEYS = ("users", "run", "partial", "steady", "steady_reason")
LIMIT = re.compile(r"^\s*(\w+)\s*([<>])\s*([+-]?[0-9]*\.?[0-9]+)\s*%\s*$")
COMPARE_MD, COMPARE_HTML, COMPARE_JSON = "compare.md", "compare.html", "compare.json"
TITLE = "vLLM stress test comparison"
METHOD = [
    "Outside the noise, with at least two runs on each side: Welch's t-test at the 5 % level, two-sided — the 95 % "
    "confidence interval of the difference of the means (Welch-Satterthwaite degrees of freedom, rounded down) "
    "excludes zero; the tables show that interval.",
    "Outside the noise, with a single run on a side (no spread to test against): the relative change reaches "
    f"{SINGLE_RUN_MIN_EFFECT:.0%}, the disagreement the steady-state rule (vllm_stress.core.steady) accepts between the "
    "two halves of one steady window.",
    "A --fail-on limit such as output_tok_s<-5% is crossed when the candidate's mean differs from the baseline's by "
    "more than the limit, in its direction. The comparison fails (exit 1) only when a limit is crossed at a level "
    "that was steady on both sides and the difference is outside the noise; a level not steady on a side (a vllm "
    "bench serve result has no steady-state verdict) is shown but never gates.",
]


@dataclass(frozen=True)
class Limit:
    """One --fail-on item: fail when the relative change of ``metric`` is below (``<``) or above (``>``) ``change``."""

    metric: str
    direction: str
    change: float

    def crossed(self, relative: float) -> bool:
        return relative < self.change if self.direction == "<" else relative > self.change

    def __str__(self) -> str:
        return f"{self.metric}{self.direction}{self.change * 100:+g}%"


@dataclass
class Difference:
    """One metric at one level: the means, their run counts, the change and whether it is outside the noise."""

    users: int
    metric: str
    baseline: float
    candidate: float
    baseline_runs: int
    candidate_runs: int
    change: float  # candidate - baseline
    relative: float  # change / baseline
    ci95: float | None  # half-width of the 95 % CI of the change (Welch), None with a single run on a side
    test: str
    significant: bool
    gated: bool  # the level was steady on both sides
    crossed: list[str]  # the --fail-on limits this change crosses

    @property
    def regression(self) -> bool:
        return self.gated and self.significant and bool(self.crossed)


def parse_fail_on(text: str | None) -> list[Limit]:
    """'output_tok_s<-5%,ttft_p99>+10%' -> limits; AnalysisError on anything else."""
    limits = []
    for item in filter(str.strip, (text or "").split(",")):
        match = LIMIT.match(item)
        if not match or match.group(1) not in METRICS:
            raise AnalysisError(
                f"--fail-on: {item!r} is not METRIC<-N% or METRIC>+N% with METRIC one of {', '.join(METRICS)}"
            )
        metric, direction, change = match.groups()
        limits.append(Limit(metric, direction, float(change) / 100))
    return limits


def load_side(sources: list[str], db: str | None) -> pd.DataFrame:
    """The per-run level rows of a side's sources (column ``run`` numbers the runs, repeats of one config)."""
    frames = []
    for source in sources:
        if source.startswith(STORE_PREFIX):
            found = [store.run_levels(db, source.removeprefix(STORE_PREFIX))]
        elif Path(source).is_file():
            found = vllm_json.read_results(source)
        elif vllm_json.result_files(source):
            found = [level for path in vllm_json.result_files(source) for level in vllm_json.read_results(path)]
        else:
            found = [run_levels(source)]
        frames += [frame.assign(run=len(frames) + index) for index, frame in enumerate(found)]
    columns = [*VERDICT_KEYS, *METRICS.values()]
    return pd.concat([frame.reindex(columns=columns) for frame in frames], ignore_index=True)


def side_servers(sources: list[str], db: str | None) -> list[str]:
    """The distinct servers of a side's runs, each as "version X, launched with ..." (run.json's server_version and
    server_launch; a vllm bench serve result names none)."""
    servers = []
    for source in sources:
        if source.startswith(STORE_PREFIX):
            meta = store.run_meta(db, source.removeprefix(STORE_PREFIX))
        elif (Path(source) / schema.RUN_FILE).is_file():
            meta = read_meta(Path(source) / schema.RUN_FILE)
        else:
            continue
        if not (meta.get("server_version") or meta.get("server_launch")):
            continue  # a run that does not say (an older run.json, a server without /version started by hand)
        launch = meta.get("server_launch") or {}
        text = f"version {meta.get('server_version') or 'unknown'}"
        text += f", launched with `{' '.join(launch['command'])}`" if launch.get("command") else ", launched by hand"
        servers += [text] if text not in servers else []
    return servers


def aggregate(per_run: pd.DataFrame) -> pd.DataFrame:
    """Per level: the mean, and with repeats the standard deviation and CI, of every metric (as in the report)."""
    numeric = per_run.astype({field: float for field in METRICS.values()})
    levels = stats.aggregate_repeats(numeric.astype({"steady": bool, "partial": bool})).set_index("users")
    for field in METRICS.values():
        if f"{field}_std" not in levels:
            levels[f"{field}_std"] = math.nan
    return levels


def welch(base: pd.Series, cand: pd.Series, field: str) -> tuple[float | None, bool, str]:
    """(CI half-width of the difference, significant, the test used) for one metric at one level; the minimum effect
    also where a side's runs give no spread (a metric only one of its runs has)."""
    n1, n2 = int(base["runs"]), int(cand["runs"])
    change = cand[field] - base[field]
    if n1 < 2 or n2 < 2 or pd.isna(base[f"{field}_std"]) or pd.isna(cand[f"{field}_std"]):
        relative = abs(change / base[field]) if base[field] else math.inf
        return None, bool(relative >= SINGLE_RUN_MIN_EFFECT), f"minimum effect {SINGLE_RUN_MIN_EFFECT:.0%}"
    v1, v2 = base[f"{field}_std"] ** 2 / n1, cand[f"{field}_std"] ** 2 / n2
    if v1 + v2 == 0:
        return 0.0, bool(change != 0), "Welch t"
    dof = (v1 + v2) ** 2 / ((v1**2 / (n1 - 1) if v1 else 0) + (v2**2 / (n2 - 1) if v2 else 0))
    half_width = stats.t_975(max(1, math.floor(dof))) * math.sqrt(v1 + v2)
    return half_width, bool(abs(change) > half_width), "Welch t"


def differences(baseline: pd.DataFrame, candidate: pd.DataFrame, limits: list[Limit]) -> list[Difference]:
    """Every metric at every level present on both sides."""
    result = []
    for users in sorted(set(baseline.index) & set(candidate.index)):
        base, cand = baseline.loc[users], candidate.loc[users]
        gated = bool(base["steady"] and cand["steady"])
        for metric, field in METRICS.items():
            if pd.isna(base[field]) or pd.isna(cand[field]):
                continue
            change = float(cand[field] - base[field])
            relative = change / base[field] if base[field] else math.copysign(math.inf, change) if change else 0.0
            ci95, significant, test = welch(base, cand, field)
            crossed = [str(limit) for limit in limits if limit.metric == metric and limit.crossed(relative)]
            result.append(
                Difference(
                    int(users),
                    metric,
                    float(base[field]),
                    float(cand[field]),
                    int(base["runs"]),
                    int(cand["runs"]),
                    change,
                    relative,
                    ci95,
                    test,
                    significant,
                    gated,
                    crossed,
                )
            )
    return result


def compare(
    baseline_sources: list[str], candidate_sources: list[str], limits: list[Limit], db: str | None = None
) -> dict:
    """The comparison: both sides' levels, every difference and the regressions (see the module docstring)."""
    baseline, candidate = aggregate(load_side(baseline_sources, db)), aggregate(load_side(candidate_sources, db))
    common = set(baseline.index) & set(candidate.index)
    if not common:
        raise AnalysisError(
            f"no level in both sides (baseline {sorted(baseline.index)}, candidate {sorted(candidate.index)})"
        )
    diffs = differences(baseline, candidate, limits)
    return {
        "baseline": {"sources": baseline_sources, "levels": baseline},
        "candidate": {"sources": candidate_sources, "levels": candidate},
        "fail_on": [str(limit) for limit in limits],
        "differences": diffs,
        "ungated": {
            int(u): ungated_reason(baseline.loc[u], candidate.loc[u])
            for u in sorted(common)
            if not (baseline.loc[u, "steady"] and candidate.loc[u, "steady"])
        },
        "regressions": [d for d in diffs if d.regression],
        "servers": {"baseline": side_servers(baseline_sources, db), "candidate": side_servers(candidate_sources, db)},
    }


def ungated_reason(base: pd.Series, cand: pd.Series) -> str:
    """Why a level does not gate: which side was not steady, and its reason."""
    return "; ".join(
        f"{side} not steady ({level['steady_reason']})"
        for side, level in (("baseline", base), ("candidate", cand))
        if not level["steady"]
    )


def percent(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 100:+.1f} %"


def figure(metric: str, value: float | None) -> str:
    """A metric's value in its unit: tokens or requests per second, latencies in ms."""
    if value is None or math.isnan(value):
        return "-"
    if metric in RATES:
        return f"{value:,.2f}" if metric == "req_s" else f"{value:,.0f}"
    milliseconds = value * 1000
    return f"{milliseconds:,.1f} ms" if abs(milliseconds) >= 10 else f"{milliseconds:.2f} ms"


def verdict_line(diff: Difference) -> str:
    ci = "" if diff.ci95 is None else f", 95 % CI of the change ±{figure(diff.metric, diff.ci95)}"
    return (
        f"{diff.users} users: {diff.metric} {figure(diff.metric, diff.baseline)} -> "
        f"{figure(diff.metric, diff.candidate)} ({percent(diff.relative)}{ci}; {diff.test}) crosses "
        f"{', '.join(diff.crossed)}"
    )


def report_blocks(result: dict, plots: dict[str, Path]) -> list:
    """The comparison report: verdict, per-level tables, ungated levels, plots and the method."""
    regressions = result["regressions"]
    sides = [f"{side}: {', '.join(result[side]['sources'])}" for side in ("baseline", "candidate")]
    blocks = [Heading(TITLE, 1), Bullets(sides)]
    if servers_differ(result):
        blocks.append(
            Paragraph(
                "The servers differ: "
                + "; ".join(
                    f"{side} {' / '.join(result['servers'][side]) or 'unknown'}" for side in ("baseline", "candidate")
                )
                + "."
            )
        )
    if regressions:
        blocks += [Heading("Regressions"), Bullets([verdict_line(d) for d in regressions])]
    else:
        limits = ", ".join(result["fail_on"]) or "none given"
        blocks.append(Paragraph(f"No --fail-on limit ({limits}) crossed outside the noise at a steady level."))
    noisy = [d for d in result["differences"] if d.crossed and not d.regression]
    if noisy:
        blocks += [
            Heading("Limits crossed that do not gate"),
            Bullets(
                [
                    verdict_line(d)
                    + ("" if d.gated else ": level not steady on both sides")
                    + ("" if d.significant else ": within the noise")
                    for d in noisy
                ]
            ),
        ]
    for users in sorted({d.users for d in result["differences"]}):
        rows = [
            [
                d.metric,
                figure(d.metric, d.baseline),
                figure(d.metric, d.candidate),
                percent(d.relative),
                "-" if d.ci95 is None else f"±{figure(d.metric, d.ci95)}",
                d.test,
                "yes" if d.significant else "no",
                ", ".join(d.crossed) or "-",
            ]
            for d in result["differences"]
            if d.users == users
        ]
        gate = result["ungated"].get(users)
        blocks += [
            Heading(f"{users} users" + (" (ungated)" if gate else "")),
            *([Paragraph(f"Ungated: {gate}.")] if gate else []),
            Table(
                [
                    "metric",
                    "baseline",
                    "candidate",
                    "change",
                    "95 % CI of the change",
                    "test",
                    "outside the noise",
                    "limits crossed",
                ],
                rows,
            ),
        ]
    only = {
        side: sorted(set(result[side]["levels"].index) - {d.users for d in result["differences"]})
        for side in ("baseline", "candidate")
    }
    if any(only.values()):
        blocks.append(
            Paragraph(
                "Levels on one side only (not compared): "
                + "; ".join(f"{side} {levels}" for side, levels in only.items() if levels)
                + "."
            )
        )
    blocks += [Heading("Plots"), *(Image(title, path) for title, path in plots.items())]
    blocks += [Heading("Method"), Bullets(METHOD)]
    return blocks


def servers_differ(result: dict) -> bool:
    """Both sides name their servers (run.json's server_version and server_launch), and not the same ones."""
    servers = result["servers"]
    return bool(servers["baseline"] and servers["candidate"] and servers["baseline"] != servers["candidate"])


def write_report(result: dict, out: Path) -> None:
    """compare.md, compare.html, compare.json and the curves of both sides into ``out``."""
    if out.exists() and not out.is_dir():
        raise AnalysisError(f"{out}: output path exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    configs = {
        side: {"levels": result[side]["levels"].reset_index().to_dict("records")} for side in ("baseline", "candidate")
    }
    plots = {
        "Throughput vs concurrency": plot_against_users(
            configs,
            [("output_tokens_per_s", "output tok/s"), ("total_tokens_per_s", "total tok/s")],
            out / "throughput.png",
        ),
        "p99 latency vs concurrency": plot_against_users(
            configs, [("ttft_p99_s", "p99 TTFT (s)"), ("e2e_p99_s", "p99 e2e latency (s)")], out / "latency.png"
        ),
    }
    blocks = report_blocks(result, plots)
    (out / COMPARE_MD).write_text(to_markdown(blocks))
    (out / COMPARE_HTML).write_text(to_html(blocks, TITLE))
    document = (
        {key: result[key] for key in ("fail_on", "ungated", "servers")}
        | {side: {"sources": result[side]["sources"]} for side in ("baseline", "candidate")}
        | {
            "differences": [asdict(d) | {"regression": d.regression} for d in result["differences"]],
            "regressions": len(result["regressions"]),
        }
    )
    (out / COMPARE_JSON).write_text(json.dumps(to_json_types(document), indent=2, allow_nan=False) + "\n")


EPILOG = """\
sources: a run folder, a vllm bench serve --save-result JSON file (or a vllm bench sweep folder of them), or db:ID
  (a run of the results store)
examples:
  python -m analysis compare results/a/run-1 results/b/run-1
  python -m analysis compare --baseline results/a/run-* --candidate results/b/run-* --fail-on 'output_tok_s<-5%'
  python -m analysis compare results/a/run-1,results/a/run-2 vllm-bench.json --out cmp/
exit status: 0 no regression, 1 a --fail-on limit crossed outside the noise at a steady level, 2 bad input
"""


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m analysis compare",
        description=__doc__.split("\n\n")[0],
        epilog=EPILOG,
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
    return parser.parse_args(argv)


def sides_of(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    """The baseline and candidate sources, from the positional or the flag form."""
    if args.sides and (args.baseline or args.candidate):
        raise AnalysisError("give the sides either as BASELINE CANDIDATE or with --baseline/--candidate, not both")
    if args.sides:
        if len(args.sides) != 2:
            raise AnalysisError(f"expected BASELINE CANDIDATE, got {len(args.sides)} argument(s)")
        sides = [[s for s in side.split(",") if s] for side in args.sides]
        if not all(sides):
            raise AnalysisError("a side names no source")
        return sides
    if not args.baseline or not args.candidate:
        raise AnalysisError("give BASELINE CANDIDATE (or --baseline ... --candidate ...)")
    return args.baseline, args.candidate


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    try:
        baseline, candidate = sides_of(args)
        result = compare(baseline, candidate, parse_fail_on(args.fail_on), args.db or store.default_db())
        if args.out:
            write_report(result, Path(args.out))
    except AnalysisError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    if servers_differ(result):
        for side in ("baseline", "candidate"):
            print(f"{side} server: {' / '.join(result['servers'][side]) or 'unknown'}")
    for diff in result["regressions"]:
        print(f"regression: {verdict_line(diff)}")
    compared = len({d.users for d in result["differences"]})
    ungated = f", {len(result['ungated'])} not steady (ungated)" if result["ungated"] else ""
    written = f"; wrote {args.out}/{COMPARE_MD}, {COMPARE_HTML}, {COMPARE_JSON}" if args.out else ""
    print(f"compared {compared} level(s){ungated}: {len(result['regressions'])} regression(s){written}")
    return 1 if result["regressions"] else 0
