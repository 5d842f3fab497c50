"""A working-set sweep in the analysis (``--shape working-set:C1,C2,...``): per level of the sweep (run.json's
``working_set``: its contexts, its working set in tokens and its hold) the hit rate by KV tier from the server's
counters, TTFT and throughput, and where the working set passed the GPU cache and the CPU tier, in tokens, by the
KV-capacity rule of vllm_stress.analysis.features.prefix (docs/concepts/kv-tiers.md, "Working-set sweep")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import pandas as pd

from vllm_stress.analysis.features import Config, ConfigInput, RunLevels
from vllm_stress.analysis.features.prefix import EXTERNAL, GPU, tier_cliffs
from vllm_stress.analysis.features.soak import window_of
from vllm_stress.analysis.io.json_types import to_json_types
from vllm_stress.analysis.measures import (
    classify,
    percentiles_by_level,
    records,
    server_prefix_hit_rate,
    tokens_in_windows,
)
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.numbers import count, percent, seconds

NOTE = (
    "Each level of the sweep holds the same users and changes how many shared contexts (--prefix-tokens each) the "
    "prompts come back to, in turn: its working set. Hit rates from the server's counters gained in the level's hold "
    "(GPU: vllm:prefix_cache_hits / queries; external, such as a CPU tier: vllm:external_prefix_cache_hits / "
    "queries); combined: prompt tokens either tier served / prompt tokens; TTFT of the requests that ended in the "
    "hold, output tokens streamed in it per second. A tier's cliff is the first level whose rate falls 15 points "
    "below the best before it (docs/concepts/kv-tiers.md)."
)


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``working_set``: per sweep run of the config, its levels and its cliffs ([] without a sweep)."""
    return {"working_set": [sweep for run in config.runs if (sweep := sweep_of(run))]}


def sweep_of(run: RunLevels) -> dict[str, Any] | None:
    """The run's sweep record, or None when it was no sweep or no level of it was held."""
    steps = run.run.meta.get("working_set")
    if not steps:
        return None
    windows = pd.DataFrame(
        {"users": range(len(steps)), "start": [s["start"] for s in steps], "end": [s["end"] for s in steps]}
    )
    table = level_table(run, windows).assign(
        contexts=[s["contexts"] for s in steps], tokens=[s["tokens"] for s in steps]
    )
    record = {"run": str(run.run.path), "levels": records(table), **cliffs(table.set_index("tokens"))}
    return cast(dict[str, Any], to_json_types(record))  # its JSON form: NaN as None


def level_table(run: RunLevels, windows: pd.DataFrame) -> pd.DataFrame:
    """Per level (window): the GPU and external hit rates, TTFT p50 and p99 of the measured requests ended in it,
    and output tokens streamed in it per second."""
    rows = classify(run.run.requests)
    rows = rows.assign(users=window_of(rows["end_time"], windows))
    measured = rows[(rows["users"] >= 0) & rows["measured"]]
    latency = percentiles_by_level(measured, {"ttft": "ttft_s"}, (50, 99)).reindex(windows["users"])
    output, _ = tokens_in_windows(rows, windows)
    server = run.run.tables.get("server")
    return pd.DataFrame(
        {
            GPU: server_prefix_hit_rate(server, windows),
            EXTERNAL: server_prefix_hit_rate(server, windows, "external_"),
            "ttft_p50_s": latency["ttft_p50_s"].to_numpy(float),
            "ttft_p99_s": latency["ttft_p99_s"].to_numpy(float),
            "output_tokens_per_s": output.to_numpy(float) / (windows["end"] - windows["start"]).to_numpy(float),
        }
    )


def cliffs(levels: pd.DataFrame) -> dict[str, Any]:
    """Each tier's cliff as the working sets (tokens) of the last level that held and the first past it (None: none
    fell), and the verdict naming them; ``levels``: the rates by tokens, ascending."""
    found = tier_cliffs(levels)
    past_gpu, past_cpu, _ = found if found else (None, None, False)
    gpu, cpu = between(levels.index, past_gpu), between(levels.index, past_cpu)
    said = ["no tier's hit rate fell as the working set grew"]
    if gpu:
        said = [f"the GPU cache stopped holding the working set between {count(gpu[0])} and {count(gpu[1])} tokens"]
    if cpu:
        said.append(f"the CPU tier between {count(cpu[0])} and {count(cpu[1])} tokens")
    return {"gpu_cliff": gpu, "cpu_cliff": cpu, "verdict": "; ".join(said)}


def between(tokens: pd.Index, past: Any) -> list[int] | None:
    """[the working set before the level ``past``, its own] (None for None)."""
    if past is None:
        return None
    before = [int(size) for size in tokens if size < past]
    return [before[-1], int(past)]


def used(config: Config) -> bool:
    return bool(config.get("working_set"))


def overview(label: str, config: Config) -> list[str]:
    return [f"In {label}'s working-set sweep, {sweep['verdict']}." for sweep in config["working_set"]]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    found: list[Block] = [Heading(f"Working-set sweep: {label}"), Paragraph(NOTE)]
    for sweep in config["working_set"]:
        found += [Paragraph(f"{sweep['run']}: {sweep['verdict']}."), sweep_table(sweep)]
    return found


def sweep_table(sweep: Mapping[str, Any]) -> Table:
    """The sweep's levels: working set, hit rate by tier, TTFT and throughput."""
    headers = ["Contexts", "Working set (tokens)", "GPU prefix cache", "External (CPU tier)", "Combined"]
    headers += ["TTFT p50", "TTFT p99", "Output tok/s"]
    rows = []
    for level in sweep["levels"]:
        gpu, external = level[GPU], level[EXTERNAL]
        combined = None if gpu is None else gpu + (external or 0) * (1 - gpu)
        rows.append(
            [
                str(level["contexts"]),
                count(level["tokens"]),
                percent(gpu),
                percent(external),
                percent(combined),
                seconds(level["ttft_p50_s"]),
                seconds(level["ttft_p99_s"]),
                count(level["output_tokens_per_s"]),
            ]
        )
    return Table(headers, rows)
