"""The report's content: the blocks (see ``render``) made from a summary and its plots."""

from __future__ import annotations

from pathlib import Path

from analysis import levels as level_defs
from analysis import stats
from analysis.render import Block, Bullets, Heading, Image, Paragraph, Table

TITLE = "vLLM stress test report"


def tokens(value: float | None) -> str:
    """Tokens/s (or any large count) with thousands separators."""
    return "-" if value is None else f"{value:,.0f}"


def seconds(value: float | None) -> str:
    """Seconds with two decimals (milliseconds below 1 s)."""
    if value is None:
        return "-"
    return f"{value:.2f} s" if value >= 1 else f"{value * 1000:.1f} ms"


def ratio(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}x"


def percent(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def mean_count(value: float | None) -> str:
    """A mean number of requests."""
    return "-" if value is None else f"{value:.1f}"


def cpu(value: float | None) -> str:
    """CPU percent of a process (100 = one core)."""
    return "-" if value is None else f"{value:.0f} %"


def with_ci(level: dict, field: str, fmt) -> str:
    """'mean ± CI half-width' when the level has repeats, else just the value."""
    ci95 = level.get(f"{field}_ci95")
    text = fmt(level[field])
    return text if ci95 is None else f"{text} ± {fmt(ci95)}"


def build_report(summary: dict, plots: dict[str, Path]) -> list[Block]:
    """Every block of the report, in order."""
    configs = summary["configs"]
    blocks: list[Block] = [Heading(TITLE, 1), Paragraph(overview(summary))]
    partial = [f"{c['label']}: {', '.join(c['partial_runs'])}" for c in configs.values() if c["partial"]]
    if partial:
        blocks += [Heading("Partial runs"), Paragraph(PARTIAL_NOTE), Bullets(partial)]
    blocks += [Heading("Peak, saturation and scaling"), comparison_table(configs)]
    blocks += [Heading("Concurrency recommendations"), recommendation_table(configs), Paragraph(RECOMMENDATION_NOTE)]
    for label, config in configs.items():
        blocks += [Heading(f"Per level: {label}"), Paragraph(config_caption(config)), level_table(config)]
        blocks += error_blocks(config)
    blocks += [Heading("Plots")] + [Image(title, path) for title, path in plots.items()]
    blocks += method_blocks(summary)
    return blocks


def overview(summary: dict) -> str:
    """One sentence per config answering the four questions."""
    sentences = []
    for label, c in summary["configs"].items():
        peak = c["peak"]
        sentences.append(
            f"{label} ({c['runs']} run{'s' if c['runs'] > 1 else ''}): peak {tokens(peak['output_tokens_per_s'])} "
            f"output tok/s ({tokens(peak['total_tokens_per_s'])} total tok/s) at {peak['users']} users with p99 e2e "
            f"{seconds(peak['e2e_p99_s'])}; saturates at {c['saturation_users']} users; "
            f"recommended concurrency {c['recommendations']['balanced']} (balanced)."
        )
    return " ".join(sentences)


def comparison_table(configs: dict[str, dict]) -> Table:
    """The seed's cross-model table: one column per config."""
    rows = {
        "Peak output tok/s": lambda c: tokens(c["peak"]["output_tokens_per_s"]),
        "Peak total tok/s": lambda c: tokens(c["peak"]["total_tokens_per_s"]),
        "Peak at (users)": lambda c: str(c["peak"]["users"]),
        "Peak total tok/s per GPU": lambda c: per_gpu(c, "total_tokens_per_s_per_gpu"),
        "Peak output tok/s per GPU": lambda c: per_gpu(c, "output_tokens_per_s_per_gpu"),
        "Saturation point (users)": lambda c: f"~{c['saturation_users']}",
        "Why it saturates there": saturation_reason,
        "Knee (users)": lambda c: "-" if c["knee_users"] is None else str(c["knee_users"]),
        "Scaling": lambda c: f"{ratio(c['scaling']['factor'])} ({c['scaling']['from']}→{c['scaling']['to']})",
        "p99 e2e @ peak": lambda c: seconds(c["peak"]["e2e_p99_s"]),
        "Lowest success rate": lambda c: percent(min_or_none(level["success_rate"] for level in c["levels"])),
    }
    return Table(["Metric", *configs], [[name, *(cell(c) for c in configs.values())] for name, cell in rows.items()])


def saturation_reason(config: dict) -> str:
    """Why throughput stops growing: the first bound (analysis.stats.bound) at or above the saturation level."""
    above = [level for level in config["levels"] if level["users"] >= config["saturation_users"]]
    if all(level.get(f) is None for level in above for f in ("server_in_system_mean", "client_cpu_max_percent")):
        return "- (no server_metrics.csv or client_health.csv)"
    level = next((level for level in above if level.get("bound")), None)
    if level is None:
        return "no queueing and nothing held back: the server's compute or bandwidth"
    return f"{level['bound']} from {level['users']} users"


def per_gpu(config: dict, key: str) -> str:
    if not config["gpus"]:
        return "- (no --gpus)"
    return f"{tokens(config['peak'][key])} ({config['gpus']} GPUs)"


def min_or_none(values) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def recommendation_table(configs: dict[str, dict]) -> Table:
    rows = []
    for label, config in configs.items():
        by_users = {level["users"]: level for level in config["levels"]}
        for use_case, users in config["recommendations"].items():
            level = by_users[users]
            rows.append([
                label,
                use_case.replace("_", " "),
                str(users),
                tokens(level["output_tokens_per_s"]),
                tokens(level["total_tokens_per_s"]),
                seconds(level["e2e_p99_s"]),
            ])  # fmt: skip
    return Table(["Config", "Use case", "Users", "Output tok/s", "Total tok/s", "p99 e2e"], rows)


def config_caption(config: dict) -> str:
    facts = [
        f"model {config['model']}" if config["model"] else "",
        f"scenario {config['scenario']}" if config["scenario"] else "",
    ]
    facts += [f"windows: {', '.join(config['windows'])}", f"runs: {', '.join(config['run_dirs'])}"]
    if config["runs"] > 1:
        facts.append("values are means over the runs ± 95 % CI half-width (Student t)")
    return "; ".join(fact for fact in facts if fact) + "."


def level_table(config: dict) -> Table:
    headers = ["Users", "Requests", "Success", "Output tok/s", "Total tok/s", "Req/s", "In flight", "Server held"]
    headers += ["Client CPU"]
    headers += ["TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99", "e2e p50", "e2e p90", "e2e p99"]
    has_goodput = "goodput_ratio" in config["levels"][0]
    headers += ["Goodput"] if has_goodput else []
    rows = []
    for level in config["levels"]:
        row = [str(level["users"]), tokens(level["requests"]), percent(level["success_rate"])]
        row += [with_ci(level, "output_tokens_per_s", tokens), with_ci(level, "total_tokens_per_s", tokens)]
        row += [f"{level['requests_per_s']:.2f}", f"{level['concurrency_mean']:.1f}"]
        row += [mean_count(level.get("server_in_system_mean")), cpu(level.get("client_cpu_max_percent"))]
        for field in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p50_s", "itl_p99_s"):
            row.append(seconds(level[field]))
        row += [seconds(level["e2e_p50_s"]), seconds(level["e2e_p90_s"]), with_ci(level, "e2e_p99_s", seconds)]
        row += [percent(level["goodput_ratio"])] if has_goodput else []
        flags = level_flags(level)
        if flags:
            row[0] = f"{row[0]} ({flags})"
        rows.append(row)
    return Table(headers, rows)


def level_flags(level: dict) -> str:
    """'partial', 'underloaded: N in flight' and/or 'unstable: fields' for a level, or ''."""
    flags = ["partial"] if level["partial"] else []
    if level["underloaded"]:
        flags.append(f"underloaded: {level['concurrency_mean']:.0f} in flight")
    if level.get("bound"):
        flags.append(level["bound"])
    if level.get("unstable"):
        flags.append("unstable: " + ", ".join(level["unstable"]))
    return "; ".join(flags)


def error_blocks(config: dict) -> list[Block]:
    """Failures by class over whole runs (requests.csv), as Locust counted them, and task exceptions."""
    items = [f"{name}: {count} (requests.csv)" for name, count in config["errors"].items()]
    items += [f"{name}: {count} (locust_failures.csv)" for name, count in config["locust_failures"].items()]
    if config["locust_exceptions"]:
        items.append(f"unhandled exceptions in Locust tasks: {config['locust_exceptions']} (locust_exceptions.csv)")
    if not items:
        return []
    return [Paragraph("Failures over the whole runs (all levels, ramps included):"), Bullets(items)]


PARTIAL_NOTE = (
    "These runs stopped early (run.json complete=false, or the rows end before the last level's hold_end). They are "
    "analysed as far as they go: the last window is cut at the last request's end, levels never reached are absent, "
    "and the affected levels are marked partial."
)
RECOMMENDATION_NOTE = (
    "Low latency = the smallest level measured. Balanced = among levels whose p99 e2e is at most "
    f"{stats.LATENCY_BUDGET}x the smallest level's, the smallest one within {stats.SATURATION_TOLERANCE:.0%} of their "
    "best output tok/s. High throughput = the saturation point."
)


def method_blocks(summary: dict) -> list[Block]:
    """How every number was obtained."""
    definitions = [
        "Steady-state window: with levels.csv, [hold_start, hold_end) of each level (ramp-up and the drain after "
        "hold_end excluded); without it, from the level's first request start plus a warm-up margin (its median e2e, "
        "at most half the level) to its last request start (the drain after it excluded).",
        "Attribution: a request belongs to the level in its users column (the level it started in). Requests, "
        "failures, success rate, req/s, goodput and the TTFT/TPOT/e2e percentiles come from the level's requests that "
        "ended inside the window. Rows merged from several workers are treated as one population with one window.",
        "Throughput (tok/s): what the server produced during the window, from every request whatever its level or "
        "outcome, / window length. Each request's output tokens are spread evenly from its first token (its start "
        "when it has no TTFT) to its end and the part inside the window counts; its prompt tokens count when its "
        "first token came. Failed or aborted streams count the output they received (chunks when the server sent no "
        "usage). This stays right when requests last as long as the window or longer (long outputs, queueing at high "
        "concurrency), where counting the requests that ended in the window would be lumpy or empty. The timeline "
        "plots spread output tokens per second the same way.",
        "Percentiles: linear interpolation between samples (numpy's default, as vllm bench serve); ITL from "
        "itl_histogram.csv buckets (smallest bucket reaching the quantile), over the whole level.",
        f"Peak: the level with the highest mean output tok/s. Saturation point: the smallest level within "
        f"{stats.SATURATION_TOLERANCE:.0%} of the peak output tok/s.",
        f"Knee: Kneedle — users and output tok/s scaled to [0, 1], the level where throughput exceeds the diagonal "
        f"most; none when that excess is below {stats.KNEE_MIN_EXCESS} or with fewer than three levels.",
        "Scaling: output tok/s at the second level divided by output tok/s at the first (total tok/s gives the same "
        "ratio when prompt and output lengths are fixed).",
        f"Underloaded: a level whose requests in flight (time-averaged over its window) stay under "
        f"{stats.UNDERLOADED_RATIO:.0%} of its users — the server never saw the target concurrency (think time, a "
        "client connection cap, a gateway limit or a client that cannot keep up), so its numbers describe a lower load.",
        "Why a level is bound (the flag after its users, and 'Why it saturates there'): 'server-bound: waiting "
        "requests' when requests queue inside the server (server_waiting_mean ≥ 1 and ≥ "
        f"{stats.QUEUED_SHARE:.0%} of server_in_system_mean: max_num_seqs or the KV cache); "
        f"'client-bound' when a load generator reached {stats.CLIENT_CPU_LIMIT_PERCENT} % CPU (Locust's warning limit) "
        "and the server did not queue; 'client/gateway-bound' when the server held under "
        f"{stats.UNDERLOADED_RATIO:.0%} of the users (server_in_system_mean, Little's law on its own e2e histogram): "
        "requests were held back before they reached it.",
        "Repeats: several runs of one label; per level the mean, sample standard deviation and 95 % CI half-width "
        f"t(0.975, n-1)·sd/√n. A level is flagged unstable when, for output tok/s, total tok/s or p99 e2e, the "
        f"coefficient of variation or the CI half-width exceeds {stats.UNSTABLE_LIMIT:.0%} of the mean.",
    ]
    if summary["slo"]:
        limits = ", ".join(f"{name} ≤ {seconds(limit)}" for name, limit in summary["slo"].items())
        definitions.append(
            f"Goodput: share of requests that succeeded with {limits} (TPOT counts as met when undefined)."
        )
    glossary = [f"{name}: {text}" for name, text in level_defs.LEVEL_FIELDS.items()]
    return [Heading("Method"), Bullets(definitions), Heading("Fields", 3), Bullets(glossary)]
