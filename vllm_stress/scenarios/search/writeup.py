"""``search.md``: an SLO search's answer, its uncertainty and every probe, in Markdown."""

from __future__ import annotations

import math
from typing import Any

from vllm_stress.core import bound
from vllm_stress.core.numbers import count, milliseconds
from vllm_stress.core.slo import SUCCESS_FIELD, Slo
from vllm_stress.scenarios.search.judge import LAG_FIELD
from vllm_stress.scenarios.search.space import Space

REPORT_FILE = "search.md"


def markdown(result: dict[str, Any], slos: list[Slo], space: Space) -> str:
    """The write-up of ``result`` (what search.json holds)."""
    lines = ["# SLO search", "", f"SLOs: {', '.join(slo.describe() for slo in slos)}.", "", answer(result, space), ""]
    lines += uncertainty(result, space)
    lines += probe_table(result, slos, space)
    lines += notes(result, space)
    return "\n".join(lines) + "\n"


def answer(result: dict[str, Any], space: Space) -> str:
    what = "concurrency" if space.whole else "arrival rate"
    if result["answer"] is None:
        return f"No probed {what} met every SLO."
    text = f"The highest {what} that meets every SLO: **{space.label(result['answer'])}**"
    if result["next_failing"] is not None:
        text += f" ({space.label(result['next_failing'])} does not: {result['failing_reason']})"
    return text + ("." if result["finished"] else " (search not finished: raise --max-probes).")


def uncertainty(result: dict[str, Any], space: Space) -> list[str]:
    """The answer's uncertainty: the bracket, and the binding SLO at the answer with its CI (with repeats)."""
    if result["answer"] is None:
        return []
    upper = space.label(result["next_failing"]) if result["next_failing"] is not None else "nothing failed yet"
    line = f"Uncertainty: the capacity lies between {space.label(result['answer'])} (passes) and {upper}."
    bind = result["binding"]
    if bind:
        slo = next(s for s in (Slo(**d) for d in result["slo"]) if s.name == bind["slo"])
        line += (
            f" The binding SLO is {slo.describe()}: {value_text(slo, bind['answer_value'], bind['answer_ci95'])}"
            f" at the answer, {value_text(slo, bind['above_value'], bind['above_ci95'])} above it."
        )
    return [line, ""]


def probe_table(result: dict[str, Any], slos: list[Slo], space: Space) -> list[str]:
    """One row per probe: its load, runs, steadiness, output tokens/s, every SLO's value and its verdict."""
    header = ["Users"] if space.whole else ["Rate (req/s)", "Users (pool)", "Arrival wait p99"]
    header += ["Runs", "Steady", "Output tok/s", *(slo.name for slo in slos), "Verdict"]
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for probe in result["probes"]:
        values, ci95 = probe["values"], probe["ci95"]
        cells = (
            [str(probe["users"])]
            if space.whole
            else [f"{probe['load']:g}", str(probe["users"]), milliseconds(values.get(LAG_FIELD))]
        )
        cells += [str(probe["runs"]), "yes" if probe["steady"] else "no", count(values.get("output_tokens_per_s"))]
        cells += [value_text(slo, values.get(slo.name), ci95.get(slo.name)) for slo in slos]
        cells.append("passes" if probe["passed"] else probe["reason"])
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def notes(result: dict[str, Any], space: Space) -> list[str]:
    """How to read the table: the repeats' means and CIs, the open loop's pool and schedule rule."""
    lines = []
    if result["repeats"] > 1:
        lines += [
            "",
            f"Each probe ran {result['repeats']} times; a value is the mean of its runs ± the half-width of "
            "its 95 % confidence interval (Student t); a probe passes when every run is steady and the means "
            "meet every SLO.",
        ]
    if not space.whole:
        lines += [
            "",
            f"Open loop: Poisson arrivals at the probe's rate, carried by ceil(rate × {space.pool_seconds:g} "
            f"s) users (--pool-seconds); a probe whose arrivals waited {bound.SCHEDULE_LAG_LIMIT_S:g} s (p99) "
            "for a free user did not keep its rate and fails.",
        ]
    return lines


def value_text(slo: Slo, value: float | None, ci95: float | None) -> str:
    """An SLO's value as its limit reads (a success rate as a share, a latency in ms), ± its CI when there is one."""

    def figure(number: float | None) -> str:
        return count(number, 4) if slo.field == SUCCESS_FIELD else milliseconds(number)

    spread = "" if ci95 is None or math.isnan(ci95) else " ± " + figure(ci95)
    return figure(value) + spread
