"""The report's content: the blocks (see ``render``) made from a summary and its plots."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from vllm_stress.analysis import levels as level_defs
from vllm_stress.analysis import stats
from vllm_stress.analysis.features import features
from vllm_stress.analysis.figures import NO_FIGURES_NOTE
from vllm_stress.analysis.figures.pareto import pareto_blocks
from vllm_stress.analysis.measures import Level
from vllm_stress.analysis.report.gpus import gpu_blocks
from vllm_stress.analysis.report.method import method_blocks
from vllm_stress.analysis.report.render import Block, Bullets, Heading, Image, Paragraph, Table
from vllm_stress.analysis.summary import ConfigSummary, Peak, Summary, Unaccounted
from vllm_stress.core import bound, capacity
from vllm_stress.core import steady as steady_rule
from vllm_stress.core.formats import added_in, format_of
from vllm_stress.core.numbers import count, cpu, dollars, percent, ratio, seconds
from vllm_stress.core.schema import (
    CLIENT_CPU_LIMIT_PERCENT,
    RUN_FILE,
)
from vllm_stress.core.sizing import worker_processes

TITLE = "vLLM stress test report"


def with_ci(level: Level, field: str, fmt: Callable[[float | None], str]) -> str:
    """'mean ± CI half-width' when the level has repeats, else just the value."""
    ci95 = level.get(f"{field}_ci95")
    text = fmt(level[field])
    return text if ci95 is None else f"{text} ± {fmt(ci95)}"


def build_report(summary: Summary, plots: dict[str, Path] | None) -> list[Block]:
    """Every block of the report, in order (``plots`` None: its figures were not drawn)."""
    configs = summary["configs"]
    blocks: list[Block] = [*twin_blocks(configs), Heading(TITLE, 1), Paragraph(overview(summary))]
    blocks += client_limit_blocks(configs) + lost_worker_blocks(summary["lost_workers"], summary["unaccounted"])
    partial = [f"{c['label']}: {', '.join(c['partial_runs'])}" for c in configs.values() if c["partial"]]
    notes = [note for config in configs.values() for note in config["input_notes"]]
    if partial or notes:
        blocks += [Heading("Partial runs"), Paragraph(PARTIAL_NOTE), Bullets(partial + notes)]
    blocks += earlier_format_blocks(configs)
    blocks += [Heading("Peak, saturation and scaling"), comparison_table(configs)]
    blocks += kv_cache_blocks(configs) + gpu_blocks(configs) + pareto_blocks(configs, summary["slo"])
    blocks += [Heading("Concurrency recommendations"), recommendation_table(configs), Paragraph(RECOMMENDATION_NOTE)]
    for label, config in configs.items():
        blocks += [Heading(f"Per level: {label}"), Paragraph(config_caption(config)), level_table(config)]
        blocks += [block for feature in features() for block in feature.blocks(label, config, configs)]
        blocks += error_blocks(config)
    blocks += [Heading("Plots")]
    blocks += [Paragraph(NO_FIGURES_NOTE)] if plots is None else [Image(title, path) for title, path in plots.items()]
    blocks += method_blocks(summary)
    return blocks


def earlier_format_blocks(configs: dict[str, ConfigSummary]) -> list[Block]:
    """The runs written by an earlier release, each with what its format lacked; [] when there are none."""
    earlier = [run for config in configs.values() for run in config["earlier_formats"]]
    if not earlier:
        return []
    lines = [
        f"{run['run']} (format {run['format_version']}, released {format_of(run['format_version']).released}): "
        + ("; ".join(run["not_computed"]) or "every figure computed")
        for run in earlier
    ]
    return [Heading("Runs written by an earlier release"), Paragraph(EARLIER_FORMAT_NOTE), Bullets(lines)]


def twin_blocks(configs: dict[str, ConfigSummary]) -> list[Block]:
    """The report's first line when a config was served by a twin: predicted, not measured, fitted to which runs, and
    how far off it was on them."""
    twins = [
        f"{label} was served by a twin calibrated on {c['twin']['source']} ({c['twin']['error']})"
        for label, c in configs.items()
        if c["twin"]
    ]
    return [Paragraph(f"**Twin — predicted, not measured:** {'; '.join(twins)}.")] if twins else []


def overview(summary: Summary) -> str:
    """One sentence per config answering the four questions, and what could not be measured."""
    sentences = []
    for label, c in summary["configs"].items():
        if c["simulated"]:
            sentences.append(f"{label}: simulated — the embedded vLLM simulator, no GPU: `{c['simulated']}`.")
        runs = f"{label} ({c['runs']} run{'s' if c['runs'] > 1 else ''})"
        peak, recommended = c["peak"], c["recommendations"]
        if peak is None or recommended is None:  # both None together: no steady level
            sentences.append(f"{runs}: no level reached a steady state, so nothing is said about its capacity.")
        else:
            sentences.append(
                f"{runs}: peak {peak_throughput(peak, c['throughput_field'])} at {peak['users']} users with p99 e2e "
                f"{seconds(peak['e2e_p99_s'])}; saturates at {c['saturation_users']} users; "
                f"recommended concurrency {recommended['balanced']} (balanced)."
            )
        sentences += unsteady_sentences(c)
        sentences += [sentence for feature in features() for sentence in feature.overview(label, c)]
    return " ".join(sentences)


def peak_throughput(peak: Peak, throughput_field: str) -> str:
    """The peak's throughput in what it is measured in: output and total tok/s, or requests/s."""
    if throughput_field == "requests_per_s":
        return f"{count(peak['requests_per_s'], 2)} requests/s (no token counts: the server sent no usage)"
    return f"{count(peak['output_tokens_per_s'])} output tok/s ({count(peak['total_tokens_per_s'])} total tok/s)"


def unsteady_sentences(config: ConfigSummary) -> list[str]:
    """What was not measurable, and the hold it needs."""
    levels = [level for level in config["levels"] if not level["steady"]]
    if not levels:
        return []
    names = ", ".join(f"{level['users']} users ({level['steady_reason']})" for level in levels)
    sentences = [f"Not steady, so left out of the peak, saturation and recommendations: {names}."]
    needs = [level for level in levels if level.get("hold_needed_s")]
    if needs:
        top = max(needs, key=lambda level: level["users"])
        e2e = top["hold_needed_s"] / steady_rule.MIN_LIFETIMES
        sentences.append(
            f"At {top['users']} users a steady window needs a hold of at least "
            f"{top['hold_needed_s']:.0f} s after a warm-up of at least {e2e:.0f} s (--step-time auto "
            f"holds each level until it is steady)."
        )
    return sentences


def comparison_table(configs: dict[str, ConfigSummary]) -> Table:
    """The MI325X tuning guide's cross-model table (docs/concepts/sources.md §1.1): one column per config."""
    rows: dict[str, Callable[[ConfigSummary], str]] = {
        "Peak output tok/s": lambda c: count(peak_value(c, "output_tokens_per_s")),
        "Peak total tok/s": lambda c: count(peak_value(c, "total_tokens_per_s")),
        "Peak at (users)": lambda c: "-" if c["peak"] is None else str(c["peak"]["users"]),
        "Peak total tok/s per GPU": lambda c: per_gpu(c, "total_tokens_per_s_per_gpu"),
        "Peak output tok/s per GPU": lambda c: per_gpu(c, "output_tokens_per_s_per_gpu"),
        "Saturation point (users)": lambda c: "-" if c["saturation_users"] is None else f"~{c['saturation_users']}",
        "Why it saturates there": saturation_reason,
        "Knee (users)": lambda c: "-" if c["knee_users"] is None else str(c["knee_users"]),
        "Scaling": lambda c: f"{ratio(c['scaling']['factor'])} ({c['scaling']['from']}→{c['scaling']['to']})",
        "p99 e2e @ peak": lambda c: seconds(peak_value(c, "e2e_p99_s")),
        "$ per M output tokens @ peak": lambda c: cost_at_peak(c, "usd_per_m_output_tokens"),
        "$ per M total tokens @ peak": lambda c: cost_at_peak(c, "usd_per_m_total_tokens"),
        "Levels not steady": lambda c: ", ".join(map(str, c["unsteady_levels"])) or "none",
        "Lowest success rate": lambda c: percent(min_or_none(level["success_rate"] for level in c["levels"])),
    }
    return Table(["Metric", *configs], [[name, *(cell(c) for c in configs.values())] for name, cell in rows.items()])


def peak_value(config: ConfigSummary, key: str) -> float | None:
    return None if config["peak"] is None else config["peak"].get(key)


def saturation_reason(config: ConfigSummary) -> str:
    """Why throughput stops growing: the first bound (vllm_stress.analysis.stats.bounds) at or above the saturation level."""
    if config["saturation_users"] is None:
        return "-"
    above = [level for level in config["levels"] if level["users"] >= config["saturation_users"]]
    if all(level.get(f) is None for level in above for f in ("server_in_system_mean", "client_cpu_max_percent")):
        return "- (no server_metrics.csv or client_health.csv)"
    level = next((level for level in above if level.get("bound")), None)
    if level is None:
        return "no queueing and nothing held back: the server's compute or bandwidth"
    return f"{level['bound']} from {level['users']} users"


def cost_at_peak(config: ConfigSummary, key: str) -> str:
    """What a million tokens cost at the peak, with the price it was computed from."""
    if config["peak"] is None:
        return "-"
    if "gpu_hour_price" not in config:
        return "- (no --gpu-hour-price)"
    return f"{dollars(config['peak'][key])} ({config['gpus']} GPUs at {dollars(config['gpu_hour_price'])}/h)"


def per_gpu(config: ConfigSummary, key: str) -> str:
    if config["peak"] is None:
        return "-"
    if not config["gpus"]:
        return "- (no --gpus)"
    return f"{count(config['peak'][key])} ({config['gpus']} GPUs)"


def min_or_none(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return min(present) if present else None


def kv_cache_blocks(configs: dict[str, ConfigSummary]) -> list[Block]:
    """Per config: the sequences its server's KV cache holds beside the saturation point and the onset of
    preemptions, and the verdict; a line per config without a ceiling saying why."""
    rows = []
    for label, config in configs.items():
        kv = config["kv_cache"]
        if kv is None:
            rows.append([label, f"no KV-cache ceiling: {no_ceiling_reason(config)}", *["-"] * 5])
            continue
        rows.append(
            [
                label,
                kv["verdict"],
                f"{count(kv['num_gpu_blocks'])} blocks of {kv['block_size']} tokens",
                f"{count(kv['sequences'])} of {count(kv['tokens_per_sequence'])} tokens",
                "-" if kv["saturation_users"] is None else str(kv["saturation_users"]),
                "none" if kv["preemption_users"] is None else str(kv["preemption_users"]),
                percent(kv["usage_at_saturation"]),
            ]
        )
    headers = ["Config", "Verdict", "KV cache", "Sequences it holds", "Saturation (users)", "Preemptions from (users)"]
    return [Heading("KV-cache ceiling"), Table([*headers, "KV cache used at saturation"], rows), Paragraph(KV_NOTE)]


def no_ceiling_reason(config: ConfigSummary) -> str:
    """Why a config has no KV-cache ceiling: its runs' format, or its server."""
    if config["earlier_formats"] and len(config["earlier_formats"]) == config["runs"]:
        return f"written before {added_in(RUN_FILE, 'server_cache_config').released}"
    return "the server exported no vllm:cache_config_info (run.json server_cache_config), or no token targets"


def recommendation_table(configs: dict[str, ConfigSummary]) -> Table:
    """Per config and use case: the recommended users, their throughput, its share of the peak and p99 e2e."""
    rows = []
    for label, config in configs.items():
        by_users = {level["users"]: level for level in config["levels"]}
        field = config["throughput_field"]
        for use_case, users in (config["recommendations"] or {}).items():
            level = by_users[users]
            rows.append(
                [
                    label,
                    use_case.replace("_", " "),
                    str(users),
                    count(level["output_tokens_per_s"]),
                    count(level["total_tokens_per_s"]),
                    percent(share(level[field], config["peak"], field)),
                    seconds(level["e2e_p99_s"]),
                ]
            )
    headers = ["Config", "Use case", "Users", "Output tok/s", "Total tok/s", "Share of peak", "p99 e2e"]
    return Table(headers, rows)


def share(value: float | None, peak: Peak | None, field: str) -> float | None:
    """``value`` as a share of the peak's ``field`` (None without either)."""
    best = (peak or {}).get(field)
    return value / best if value is not None and best else None


def config_caption(config: ConfigSummary) -> str:
    facts = [
        f"model {config['model']}" if config["model"] else "",
        f"scenario {config['scenario']}" if config["scenario"] else "",
    ]
    facts += [f"windows: {', '.join(config['windows'])}", f"runs: {', '.join(config['run_dirs'])}"]
    if config["runs"] > 1:
        facts.append("values are means over the runs ± 95 % CI half-width (Student t)")
    return "; ".join(fact for fact in facts if fact) + "."


def level_table(config: ConfigSummary) -> Table:
    headers = ["Users", "Steady", "Requests", "Success", "Output tok/s", "Total tok/s", "Req/s", "In flight"]
    headers += ["Server held", "Client CPU", "Client lag"]
    headers += ["TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p50", "ITL p99", "e2e p50", "e2e p90", "e2e p99"]
    has_goodput = "goodput_ratio" in config["levels"][0]
    headers += ["Goodput"] if has_goodput else []
    priced = "gpu_hour_price" in config
    headers += ["$/M output tok", "$/M total tok"] if priced else []
    columns = [column for feature in features() for column in feature.columns(config)]
    headers += [column.header for column in columns]
    rows = []
    for level in config["levels"]:
        row = [str(level["users"]), "yes" if level["steady"] else f"no: {level['steady_reason']}"]
        row += [count(level["requests"]), percent(level["success_rate"])]
        row += [with_ci(level, "output_tokens_per_s", count), with_ci(level, "total_tokens_per_s", count)]
        row += [count(level["requests_per_s"], 2), count(level["concurrency_mean"], 1)]
        row += [count(level.get("server_in_system_mean"), 1), cpu(level.get("client_cpu_max_percent"))]
        row += [seconds(level.get("client_loop_lag_max_ms") and level["client_loop_lag_max_ms"] / 1000)]
        for field in ("ttft_p50_s", "ttft_p99_s", "tpot_p50_s", "tpot_p99_s", "itl_p50_s", "itl_p99_s"):
            row.append(seconds(level[field]))
        row += [seconds(level["e2e_p50_s"]), seconds(level["e2e_p90_s"]), with_ci(level, "e2e_p99_s", seconds)]
        row += [percent(level["goodput_ratio"])] if has_goodput else []
        row += [dollars(level[cost]) for cost in level_defs.COST_FIELDS.values()] if priced else []
        row += [column.cell(level) for column in columns]
        flags = level_flags(level)
        if flags:
            row[0] = f"{row[0]} ({flags})"
        rows.append(row)
    return Table(headers, rows)


def level_flags(level: Level) -> str:
    """'partial', 'underloaded: N in flight', the bound, aborted and off-target counts and/or 'unstable: fields'
    for a level, or ''."""
    flags = ["partial"] if level["partial"] else []
    if level["underloaded"]:
        flags.append(f"underloaded: {count(level['concurrency_mean'])} in flight")
    if level.get("bound"):
        flags.append(level["bound"])
    if level.get("aborted"):
        flags.append(f"{count(level['aborted'])} aborted at the stop")
    if level.get("off_target"):
        flags.append(f"{count(level['off_target'])} off their token targets")
    if level.get("unstable"):
        flags.append("unstable: " + ", ".join(level["unstable"]))
    return "; ".join(flags)


def error_blocks(config: ConfigSummary) -> list[Block]:
    """Failures by class over whole runs (requests.csv), as Locust counted them, and task exceptions."""
    items = [f"{name}: {failed} (requests.csv)" for name, failed in config["errors"].items()]
    items += [f"{name}: {seen} (locust_failures.csv)" for name, seen in config["locust_failures"].items()]
    if config["locust_exceptions"]:
        items.append(f"unhandled exceptions in Locust tasks: {config['locust_exceptions']} (locust_exceptions.csv)")
    if config["aborted"]:
        items.append(
            f"not failures: {config['aborted']} streams aborted because the run stopped its users "
            "(requests.csv error Aborted; their tokens count in tok/s)"
        )
    if not items:
        return []
    return [Paragraph("Failures over the whole runs (all levels, ramps included):"), Bullets(items)]


KV_NOTE = (
    "Sequences it holds: the server's KV-cache blocks (vLLM's vllm:cache_config_info, less its null block) over the "
    "blocks one sequence of the run's prompt + output tokens takes (rounded up to whole blocks). Preemptions from: "
    "the smallest level whose window saw the server preempt (vllm:num_preemptions_total). Memory-bound when the cache "
    "holds no more sequences than the saturation point's users, or preemptions start at or below it; batch-bound "
    "when from the saturation point on the running batch (vllm:num_requests_running) stayed at the launch's "
    "--max-num-seqs (or, without it, flat over two or more levels) with requests waiting and the cache under "
    f"{bound.KV_FULL_SHARE:.0%} full: raising --max-num-seqs comes before more compute; else compute-bound, with the cache's mean use at the "
    "saturation point (vllm:kv_cache_usage_perc)."
)
PARTIAL_NOTE = (
    "These runs stopped early (run.json complete=false, or the rows end before the last level's hold_end). They are "
    "analysed as far as they go: the last window is cut at the last request's end, levels never reached are absent, "
    "and the affected levels are marked partial."
)
EARLIER_FORMAT_NOTE = (
    "These run folders were written by an earlier release of vllm-stress, in an earlier format "
    "(docs/concepts/formats.md). They are analysed as written: what their format did not record is left out of "
    "the tables, as listed here."
)
RECOMMENDATION_NOTE = (
    "Low latency = the smallest level measured. Balanced = the level with the lowest p99 e2e among those that deliver "
    f"at least {stats.BALANCED_SHARE:.0%} of the peak's output tok/s: most of the deployment's throughput, with the "
    "rest as headroom, at the latency of a server that is not yet full. High throughput = the saturation point (the "
    f"smallest level within {capacity.SATURATION_TOLERANCE:.0%} of the peak): more users only lengthen the queue."
)


LOST_WORKERS_NOTE = (
    "These Locust workers stopped answering the master mid-run (run.json lost_workers). The requests they had in "
    "flight, and the rows they had not yet reported (a few seconds before their last heartbeat), are missing: the "
    "levels around that time count fewer requests and tokens than the server served. The unaccounted count is the "
    "server's own count of requests finished during the run (vllm:request_success_total) minus the rows, assuming "
    "the run was the server's only client."
)
CLIENT_LIMIT_NOTE = (
    "At these levels a load generator (the master or a worker process) reached Locust's CPU warning limit: the "
    "timings may include the client's own delay. The worker processes the level's output tokens/s needs are planned "
    "as `python -m scenarios plan` does (CPU per streamed token from benchmarks/client.md, at most half a core each)."
)


def client_limit_blocks(configs: dict[str, ConfigSummary]) -> list[Block]:
    """The report's warning about levels where a load generator reached Locust's CPU limit, with the worker
    processes that level needed; [] when none did."""
    items = []
    for label, config in configs.items():
        for level in config["levels"]:
            busiest = level.get("client_cpu_max_percent")
            if busiest is not None and busiest >= CLIENT_CPU_LIMIT_PERCENT:
                needed = worker_processes(level["output_tokens_per_s"])
                items.append(
                    f"{label}, {level['users']} users: a load generator at {cpu(busiest)} CPU; "
                    f"{count(level['output_tokens_per_s'])} output tok/s need {needed} worker process"
                    f"{'es' if needed > 1 else ''}"
                )
    return [Heading("Client CPU limit reached"), Paragraph(CLIENT_LIMIT_NOTE), Bullets(items)] if items else []


def lost_worker_blocks(lost_workers: list[dict[str, Any]], unaccounted: list[Unaccounted]) -> list[Block]:
    """The report's section on workers lost mid-run and on requests the server served that have no row; [] when
    there are none."""
    items = [
        f"{lost['run']}: worker {lost['worker']}, last heartbeat {utc(lost['last_seen'])}, "
        f"{lost.get('rows', '?')} rows received from it"
        for lost in lost_workers
    ]
    items += [
        f"{run['run']}: {run['unaccounted_requests']} requests unaccounted: the server finished "
        f"{run['server_requests']}, requests.csv holds {run['rows']}; lost with worker(s) "
        f"{', '.join(run['lost_with']) or '(none lost: rows missing)'}"
        for run in unaccounted
    ]
    return (
        [Heading("Lost workers and unaccounted requests"), Paragraph(LOST_WORKERS_NOTE), Bullets(items)]
        if items
        else []
    )


def utc(timestamp: float | None) -> str:
    return "never" if timestamp is None else time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(timestamp))
