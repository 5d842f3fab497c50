"""The comparison's outputs: compare.md, compare.html, compare.json and the curves of both sides, and the one-line
verdict of a difference that the command line prints too."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from vllm_stress.analysis.compare.compare import SIDES, SINGLE_RUN_MIN_EFFECT, Comparison, Cost, Difference
from vllm_stress.analysis.features.spec_counters import ACCEPTED_LENGTH, crossover_blocks
from vllm_stress.analysis.figures.plots import plot_against_users
from vllm_stress.analysis.io.json_types import to_json_types
from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.analysis.measures import records
from vllm_stress.analysis.report.render import Block, Bullets, Heading, Image, Paragraph, Table, to_html, to_markdown
from vllm_stress.core.numbers import count, dollars, milliseconds, percent

COMPARE_MD, COMPARE_HTML, COMPARE_JSON = "compare.md", "compare.html", "compare.json"
TITLE = "vLLM stress test comparison"
RATES = ("output_tok_s", "total_tok_s", "req_s")
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
DIFFERENCE_HEADERS = [
    "metric",
    "baseline",
    "candidate",
    "change",
    "95 % CI of the change",
    "test",
    "outside the noise",
    "limits crossed",
]


def figure(metric: str, value: float | None) -> str:
    """A metric's value in its unit: tokens or requests per second, latencies in ms."""
    if metric in RATES:
        return count(value, 2 if metric == "req_s" else 0)
    if metric == "canary_agreement":
        return percent(value)
    if metric == "spec_accepted_len":
        return count(value, 2)
    return milliseconds(value, 1 if value is not None and abs(value * 1000) >= 10 else 2)


def verdict_line(diff: Difference) -> str:
    """'10 users: output_tok_s 200 -> 160 (-20.0 %; ...) crosses ...': one difference and the limits it crosses."""
    ci = "" if diff.ci95 is None else f", 95 % CI of the change ±{figure(diff.metric, diff.ci95)}"
    return (
        f"{diff.users} users: {diff.metric} {figure(diff.metric, diff.baseline)} -> "
        f"{figure(diff.metric, diff.candidate)} ({percent(diff.relative, signed=True)}{ci}; {diff.test}) crosses "
        f"{', '.join(diff.crossed)}"
    )


def cost_line(cost: Cost) -> str:
    """'10 users: $27.78 -> $17.36 per million output tokens (-37.5 %)': one level's cost on both sides."""
    return (
        f"{cost.users} users: {dollars(cost.baseline)} -> {dollars(cost.candidate)} per million output tokens "
        f"({percent(cost.relative, signed=True)})"
    )


def cost_blocks(comparison: Comparison) -> list[Block]:
    """What a million output tokens cost at each level on both sides, at each side's GPUs and price (nothing
    without --gpu-hour-price)."""
    if not comparison.pricing:
        return []
    priced = "; ".join(f"{side} {comparison.pricing[side]}" for side in SIDES)
    rows = [
        [str(c.users), dollars(c.baseline), dollars(c.candidate), percent(c.relative, signed=True)]
        for c in comparison.costs
    ]
    return [
        Heading("Cost per million output tokens"),
        Paragraph(
            f'At each level\'s mean output tok/s, with {priced} (docs/concepts/analysis.md, "Capacity planning").'
        ),
        Table(["users", "baseline", "candidate", "change"], rows),
    ]


def servers_text(comparison: Comparison, side: str) -> str:
    return " / ".join(comparison.side(side).servers) or "unknown"


def report_blocks(comparison: Comparison, plots: dict[str, Path]) -> list[Block]:
    """The comparison report: sides, verdict, per-level tables, levels on one side only, plots and the method."""
    sides = [f"{side}: {', '.join(comparison.side(side).sources)}" for side in SIDES]
    twin = comparison.twin_line()
    blocks: list[Block] = [Paragraph(f"**{twin.capitalize()}:** one side is predicted, not measured.")] if twin else []
    blocks += [Heading(TITLE, 1), Bullets(sides)]
    if comparison.servers_differ:
        servers = "; ".join(f"{side} {servers_text(comparison, side)}" for side in SIDES)
        blocks.append(Paragraph(f"The servers differ: {servers}."))
    blocks += verdict_blocks(comparison) + cost_blocks(comparison)
    blocks += crossover_blocks(comparison.differences, comparison.candidate.levels.get(ACCEPTED_LENGTH))
    for users in comparison.compared_users:
        blocks += level_blocks(comparison, users)
    blocks += one_side_blocks(comparison)
    blocks += [Heading("Plots"), *(Image(title, path) for title, path in plots.items())]
    return blocks + [Heading("Method"), Bullets(METHOD)]


def verdict_blocks(comparison: Comparison) -> list[Block]:
    """The regressions (or that there are none), and the limits crossed that do not gate."""
    regressions = comparison.regressions
    if regressions:
        blocks: list[Block] = [Heading("Regressions"), Bullets([verdict_line(d) for d in regressions])]
    else:
        limits = ", ".join(comparison.fail_on) or "none given"
        blocks = [Paragraph(f"No --fail-on limit ({limits}) crossed outside the noise at a steady level.")]
    noisy = [d for d in comparison.differences if d.crossed and not d.regression]
    if noisy:
        why = [
            verdict_line(d)
            + ("" if d.gated else ": level not steady on both sides")
            + ("" if d.significant else ": within the noise")
            for d in noisy
        ]
        blocks += [Heading("Limits crossed that do not gate"), Bullets(why)]
    return blocks


def level_blocks(comparison: Comparison, users: int) -> list[Block]:
    """One level's heading, why it does not gate (if so) and its table of differences."""
    rows = [
        [
            d.metric,
            figure(d.metric, d.baseline),
            figure(d.metric, d.candidate),
            percent(d.relative, signed=True),
            "-" if d.ci95 is None else f"±{figure(d.metric, d.ci95)}",
            d.test,
            "yes" if d.significant else "no",
            ", ".join(d.crossed) or "-",
        ]
        for d in comparison.differences
        if d.users == users
    ]
    gate = comparison.ungated.get(users)
    return [
        Heading(f"{users} users" + (" (ungated)" if gate else "")),
        *([Paragraph(f"Ungated: {gate}.")] if gate else []),
        Table(DIFFERENCE_HEADERS, rows),
    ]


def one_side_blocks(comparison: Comparison) -> list[Block]:
    """The levels only one side measured, or nothing."""
    compared = set(comparison.compared_users)
    only = {side: sorted(set(comparison.side(side).levels.index) - compared) for side in SIDES}
    if not any(only.values()):
        return []
    levels = "; ".join(f"{side} {users}" for side, users in only.items() if users)
    return [Paragraph(f"Levels on one side only (not compared): {levels}.")]


def write_plots(comparison: Comparison, out: Path) -> dict[str, Path]:
    """Throughput and p99 latency against concurrency, both sides in each panel; {title: path}."""
    levels = {side: records(comparison.side(side).levels.reset_index()) for side in SIDES}
    return {
        "Throughput vs concurrency": plot_against_users(
            levels,
            [("output_tokens_per_s", "output tok/s"), ("total_tokens_per_s", "total tok/s")],
            out / "throughput.png",
        ),
        "p99 latency vs concurrency": plot_against_users(
            levels, [("ttft_p99_s", "p99 TTFT (s)"), ("e2e_p99_s", "p99 e2e latency (s)")], out / "latency.png"
        ),
    }


def json_document(comparison: Comparison) -> dict[str, object]:
    """compare.json: the limits, the ungated levels, the servers, the sources, every difference and, when priced,
    each side's GPUs and price and the cost per million output tokens at each level."""
    return {
        "fail_on": comparison.fail_on,
        "ungated": comparison.ungated,
        "servers": {side: comparison.side(side).servers for side in SIDES},
        **{side: {"sources": comparison.side(side).sources} for side in SIDES},
        "differences": [asdict(d) | {"regression": d.regression} for d in comparison.differences],
        "pricing": {side: asdict(p) for side, p in comparison.pricing.items()} if comparison.pricing else None,
        "costs": [asdict(cost) for cost in comparison.costs],
        "regressions": len(comparison.regressions),
    }


def write_report(comparison: Comparison, out: Path) -> None:
    """compare.md, compare.html, compare.json and the curves of both sides into ``out``."""
    if out.exists() and not out.is_dir():
        raise AnalysisError(f"{out}: output path exists and is not a folder")
    out.mkdir(parents=True, exist_ok=True)
    blocks = report_blocks(comparison, write_plots(comparison, out))
    (out / COMPARE_MD).write_text(to_markdown(blocks))
    (out / COMPARE_HTML).write_text(to_html(blocks, TITLE))
    document = to_json_types(json_document(comparison))
    (out / COMPARE_JSON).write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")
