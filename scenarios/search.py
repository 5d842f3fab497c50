"""``python -m scenarios search``: the highest concurrency that meets every SLO, found by probing.

    python -m scenarios search --scenario smoke --slo ttft_p99=2000,tpot_p99=50ms,success=99.9% --out results/slo

Each probe is one level of the scenario's user class at U users, held until it is steady (``--step-time auto``,
``vllm_stress.steady``), on a master with workers, into ``OUT/probe-U``; the analysis measures it with the report's
definitions. A probe passes when it is steady and meets every SLO. The search brackets — U doubles from ``--low``
until a probe fails or ``--high`` is reached — then bisects between the highest pass and the lowest fail until they
are within ``--precision`` (a share of the pass, at least one user). It is bounded by ``--max-probes``, and resumable:
a probe folder that already holds a complete run is analysed again, not re-run.

SLO names are a level field's percentile name (``ttft_p99``, ``tpot_p50``, ``e2e_p90``, ``itl_p99``), a bare number
being milliseconds as in ``vllm bench serve --goodput`` (``s`` and ``ms`` suffixes are understood), or ``success``
(a percentage). A probe that is not steady fails: its numbers are a transient's and certify nothing.
"""

from __future__ import annotations

import json
import logging
import math
import re
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

from analysis.levels import PERCENTILES
from analysis.load import AnalysisError
from analysis.report import run_levels
from scenarios.runner import (
    ScenarioError,
    api_headers,
    default_workers,
    has_rows,
    prepare_out,
    read_config,
    run_locust,
    server,
    with_overrides,
)
from vllm_stress import schema

log = logging.getLogger("scenarios")

LATENCY_SLO = re.compile(r"^(ttft|tpot|itl|e2e)_p(\d+)$")
LIMIT = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*(ms|s|%)?\s*$")
RESULT_FILE = "search.json"
REPORT_FILE = "search.md"


@dataclass
class Slo:
    name: str  # as given: ttft_p99, success ...
    field: str  # the level field it reads: ttft_p99_s, success_rate ...
    limit: float  # in the field's unit (seconds, or a 0..1 share)

    def met(self, level: dict) -> bool:
        value = level.get(self.field)
        if value is None or (isinstance(value, float) and math.isnan(value)):
            return False
        return value >= self.limit if self.field == "success_rate" else value <= self.limit

    def describe(self) -> str:
        return f"{self.name} ≥ {self.limit:.2%}" if self.field == "success_rate" else f"{self.name} ≤ {self.limit * 1000:g} ms"


@dataclass
class Probe:
    users: int
    passed: bool
    steady: bool
    reason: str  # why it failed ("" when it passed)
    values: dict = field(default_factory=dict)  # SLO name -> measured value, and output_tokens_per_s


def parse_slos(text: str) -> list[Slo]:
    """'ttft_p99=2000,tpot_p99=50ms,success=99.9%' -> SLOs; a clear ScenarioError for anything else."""
    slos = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        name, _, limit = item.partition("=")
        match = LIMIT.match(limit)
        latency = LATENCY_SLO.match(name.strip())
        if not match:
            raise ScenarioError(f"--slo: {item!r} is not NAME=LIMIT (e.g. ttft_p99=2000ms, success=99.9%)")
        value, unit = float(match[1]), match[2]
        if name.strip() == "success":
            slos.append(Slo("success", "success_rate", value / 100 if unit == "%" or value > 1 else value))
        elif latency and int(latency[2]) in PERCENTILES and unit != "%":
            slos.append(Slo(name.strip(), f"{latency[1]}_p{latency[2]}_s", value if unit == "s" else value / 1000))
        else:
            known = ", ".join(f"{m}_p{p}" for m in ("ttft", "tpot", "itl", "e2e") for p in PERCENTILES)
            raise ScenarioError(f"--slo: unknown {name.strip()!r} (use {known} or success)")
    if not slos:
        raise ScenarioError("--slo: give at least one, e.g. ttft_p99=2000ms")
    return slos


def judge(run_dir: Path, users: int, slos: list[Slo]) -> Probe:
    """Analyse one probe's run folder against the SLOs."""
    try:
        stats = run_levels(run_dir).set_index("users")
    except AnalysisError as error:
        return Probe(users, False, False, f"not measurable: {error}")
    if users not in stats.index:
        return Probe(users, False, False, "the level was never held")
    level = stats.loc[users].to_dict()
    values = {slo.name: level.get(slo.field) for slo in slos} | {"output_tokens_per_s": level["output_tokens_per_s"]}
    missed = [slo.describe() for slo in slos if not slo.met(level)]
    if not level["steady"]:
        return Probe(users, False, False, f"not steady: {level['steady_reason']}", values)
    return Probe(users, not missed, True, f"misses {', '.join(missed)}" if missed else "", values)


def next_users(probes: dict[int, Probe], low: int, high: int, precision: float) -> int | None:
    """The next concurrency to probe, or None when the answer is found (see the module docstring)."""
    passed = [u for u, p in probes.items() if p.passed]
    failed = [u for u, p in probes.items() if not p.passed]
    best = max(passed, default=None)
    worst = min((u for u in failed if best is None or u > best), default=None)
    if best is None:
        return None if low in probes else low
    if worst is None:
        return None if best >= high else min(best * 2, high)
    if worst - best <= max(1, precision * best):
        return None
    return (best + worst) // 2


def search(name: str, out: Path, slos: list[Slo], *, target: str | None = None, low: int = 1, high: int = 1024,
           precision: float = 0.1, max_probes: int = 12, workers: int | None = None, overwrite: bool = False,
           simulator_args: list[str] | None = None, locust_args: list[str] | None = None) -> dict:
    """Run the search (see the module docstring); returns what ``search.json`` holds."""
    if not 1 <= low <= high:
        raise ScenarioError(f"--low and --high must be 1 <= low <= high, got {low} and {high}")
    config, keys = read_config(name)
    out = out.resolve()
    locust_args = ["--step-time=auto", *(locust_args or [])]
    keys = with_overrides(keys, locust_args)
    if not (out / RESULT_FILE).is_file():  # a search folder is resumed; anything else must be new or overwritten
        prepare_out(out, overwrite)
    probes = {probe.users: probe for probe in load_probes(out)}
    sim_args = shlex.split(keys.get("simulator", "")) + list(simulator_args or [])
    with server(target, sim_args, headers=api_headers(locust_args)) as url:
        while (users := next_users(probes, low, high, precision)) is not None and len(probes) < max_probes:
            run_dir = out / f"probe-{users}"
            if not complete(run_dir):
                log.info("probe %d: %d users against %s -> %s", len(probes) + 1, users, url, run_dir)
                run_locust(name, config, keys | {"levels": str(users)}, url, run_dir, workers or default_workers(),
                           [*locust_args, f"--levels={users}", "--overwrite"])
            probes[users] = judge(run_dir, users, slos)
            log.info("probe at %d users: %s", users, "passes" if probes[users].passed else probes[users].reason)
            write_result(out, name, slos, probes, low, high, precision)
    return write_result(out, name, slos, probes, low, high, precision)


def complete(run_dir: Path) -> bool:
    meta = run_dir / schema.RUN_FILE
    return has_rows(run_dir / schema.REQUESTS_FILE) and meta.is_file() and json.loads(meta.read_text()).get("complete")


def load_probes(out: Path) -> list[Probe]:
    path = out / RESULT_FILE
    return [Probe(**probe) for probe in json.loads(path.read_text())["probes"]] if path.is_file() else []


def write_result(out: Path, name: str, slos: list[Slo], probes: dict[int, Probe], low: int, high: int,
                 precision: float) -> dict:
    """search.json and search.md: every probe, the answer and its bracket, the SLO that binds."""
    ordered = sorted(probes.values(), key=lambda probe: probe.users)
    passed = [p.users for p in ordered if p.passed]
    best = max(passed, default=None)
    above = next((p for p in ordered if best is not None and p.users > best and not p.passed), None)
    finished = next_users(probes, low, high, precision) is None
    result = {
        "scenario": name, "slo": [asdict(slo) for slo in slos], "probes": [asdict(p) for p in ordered],
        "answer_users": best, "next_failing_users": above.users if above else None,
        "binding": above.reason if above else "", "finished": finished,
    }
    (out / RESULT_FILE).write_text(json.dumps(result, indent=2, default=float) + "\n")
    (out / REPORT_FILE).write_text(markdown(result, slos))
    return result


def markdown(result: dict, slos: list[Slo]) -> str:
    if result["answer_users"] is None:
        answer = "No probed concurrency met every SLO."
    else:
        answer = f"The highest concurrency that meets every SLO: **{result['answer_users']} users**"
        if result["next_failing_users"]:
            answer += f" ({result['next_failing_users']} users does not: {result['binding']})"
        answer += "." if result["finished"] else " (search not finished: raise --max-probes)."
    header = ["Users", "Steady", "Output tok/s", *(slo.name for slo in slos), "Verdict"]
    lines = ["# SLO search", "", f"SLOs: {', '.join(slo.describe() for slo in slos)}.", "", answer, "",
             "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for probe in result["probes"]:
        values = probe["values"]
        cells = [str(probe["users"]), "yes" if probe["steady"] else "no", fmt(values.get("output_tokens_per_s"), 0)]
        cells += [fmt(values.get(slo.name), 4) if slo.field == "success_rate" else ms(values.get(slo.name))
                  for slo in slos]
        cells.append("passes" if probe["passed"] else probe["reason"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def ms(seconds) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:,.1f} ms"


def fmt(value, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"
