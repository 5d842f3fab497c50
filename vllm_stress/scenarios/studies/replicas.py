"""``python -m scenarios plan --target-rate R --from-report DIR``: the replicas, GPUs and dollars an hour a target rate
takes, from the rate one replica sustained at a steady level of a report or at an SLO search's answer
(docs/concepts/scenarios.md, section 6)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_stress.core.capacity import SLO_SHARE, replicas_for
from vllm_stress.core.formats import format_of
from vllm_stress.core.numbers import count, dollars, percent, seconds
from vllm_stress.core.schema import FORMAT_KEY, SUMMARY_JSON
from vllm_stress.core.slo import Slo
from vllm_stress.scenarios.search.result import RESULT_FILE
from vllm_stress.scenarios.search.space import UNITS

# a target rate's unit -> the level field one replica's rate is read from
RATE_UNITS = {"req/s": "requests_per_s", "tok/s": "output_tokens_per_s"}
RATE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(req/s|tok/s)\s*$")


@dataclass(frozen=True)
class Source:
    """The level one replica's rate is read from: the folder (and config), the level, why it was chosen, whether it
    was steady (and why not), its rates by level field, and the GPUs and price its report was given."""

    where: str
    level: str
    why: str
    steady: bool
    steady_reason: str
    rates: dict[str, float | None]
    gpus: int | None = None
    gpu_hour_price: float | None = None


def parse_rate(text: str) -> tuple[float, str]:
    """'300req/s' -> (300.0, "req/s"); '2,000 tok/s' -> (2000.0, "tok/s") (output tokens); ValueError otherwise."""
    match = RATE.match(text.replace(",", ""))
    if not match or not float(match[1]) > 0:
        raise ValueError(f"--target-rate: {text!r} is not a positive rate in req/s or tok/s (e.g. 300req/s)")
    return float(match[1]), match[2]


def read_source(folder: Path, label: str = "") -> Source:
    """The source level of a report folder (summary.json) or an SLO search folder (search.json)."""
    if (folder / RESULT_FILE).is_file():
        return search_source(folder, json.loads((folder / RESULT_FILE).read_text()))
    if (folder / SUMMARY_JSON).is_file():
        summary = json.loads((folder / SUMMARY_JSON).read_text())
        if FORMAT_KEY in summary:  # summaries from before formats were numbered hold what plan reads
            format_of(summary[FORMAT_KEY])
        return report_source(folder, summary, label)
    raise ValueError(f"{folder}: no {SUMMARY_JSON} (a report) or {RESULT_FILE} (an SLO search)")


def search_source(folder: Path, saved: dict[str, Any]) -> Source:
    """An SLO search's answer: the highest load that met every SLO, with its probe's mean rates."""
    if saved["answer"] is None:
        raise ValueError(f"{folder}: the SLO search has no answer (no probe met its SLOs)")
    probe = next(p for p in saved["probes"] if p["load"] == saved["answer"])
    limits = ", ".join(Slo(**slo).describe() for slo in saved["slo"])
    return Source(
        str(folder),
        f"{saved['answer']:g} {UNITS[saved['over']]}",
        f"the SLO search's answer ({limits})",
        probe["steady"],
        probe["reason"],
        {field: probe["values"].get(field) for field in RATE_UNITS.values()},
    )


def report_source(folder: Path, summary: dict[str, Any], label: str) -> Source:
    """A report's level for one config: the level meeting its --slo with the most users, else its peak."""
    configs = summary["configs"]
    if not label and len(configs) > 1:
        raise ValueError(f"{folder}: the report holds configs {', '.join(configs)}: give --label NAME")
    if label and label not in configs:
        raise ValueError(f"{folder}: no config {label!r} in the report (it holds {', '.join(configs)})")
    config = configs[label or next(iter(configs))]
    where = f"{folder}, config {config['label']}"
    level, why = slo_level(where, config, summary["slo"]) if summary["slo"] else peak_level(where, config)
    return Source(
        where,
        f"{level['users']} users",
        why,
        bool(level["steady"]),
        level["steady_reason"],
        {field: level.get(field) for field in RATE_UNITS.values()},
        config["gpus"],
        config.get("gpu_hour_price"),
    )


def slo_level(where: str, config: dict[str, Any], slo: dict[str, float]) -> tuple[dict[str, Any], str]:
    """The level with the most users whose goodput ratio reaches SLO_SHARE, and why it was chosen."""
    limits = ", ".join(f"{name} ≤ {seconds(limit)}" for name, limit in slo.items())
    meeting = [level for level in config["levels"] if (level.get("goodput_ratio") or 0) >= SLO_SHARE]
    if not meeting:
        raise ValueError(f"{where}: no level had {percent(SLO_SHARE)} of its requests meet the SLO ({limits})")
    why = f"the level with the most users where {percent(SLO_SHARE)} of requests met the SLO ({limits})"
    return max(meeting, key=lambda level: level["users"]), why


def peak_level(where: str, config: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The peak steady level (the report had no --slo), and why it was chosen."""
    if config["peak"] is None:
        raise ValueError(f"{where}: no steady level, so no peak to plan from")
    users = config["peak"]["users"]
    return next(level for level in config["levels"] if level["users"] == users), "the peak steady level (no --slo)"


def replica_plan(
    source: Source, target: float, unit: str, headroom: float, gpus: int | None, gpu_hour_price: float | None
) -> str:
    """The arithmetic, a line per step: the source, the target with headroom, replicas, GPUs and dollars an hour;
    ValueError when the source level was not steady or has no rate in ``unit``."""
    if not source.steady:
        raise ValueError(
            f"{source.where}: {source.level} ({source.why}) was not steady ({source.steady_reason}): "
            "its rate is a transient's, not a capacity"
        )
    per_replica = source.rates[RATE_UNITS[unit]]
    if not per_replica:
        raise ValueError(f"{source.where}: {source.level} has no {unit} to plan from")
    needed = target * (1 + headroom)
    replicas = replicas_for(target, headroom, per_replica)
    rates = ", ".join(f"{count(source.rates[field], 2)} {name}" for name, field in RATE_UNITS.items())
    lines = [
        f"source: {source.where}: {source.level}, {source.why}: {rates} per replica",
        f"target: {count(target, 2)} {unit} x (1 + {headroom:g} headroom) = {count(needed, 2)} {unit}",
        f"replicas: ceil({count(needed, 2)} / {count(per_replica, 2)} {unit} per replica) = {replicas}",
    ]
    gpus = gpus or source.gpus
    price = gpu_hour_price or source.gpu_hour_price
    if not gpus:
        return "\n".join([*lines, "GPUs and cost: give --gpus (GPUs per replica)"])
    lines.append(f"GPUs: {replicas} replicas x {gpus} GPUs each = {replicas * gpus}")
    if not price:
        return "\n".join([*lines, "cost: give --gpu-hour-price"])
    cost = replicas * gpus * price
    return "\n".join(
        [*lines, f"cost: {replicas * gpus} GPUs x {dollars(price)} per GPU-hour = {dollars(cost)} an hour"]
    )
