"""``python -m scenarios search``: the highest concurrency — or arrival rate — that meets every SLO, found by probing.

    python -m scenarios search --scenario smoke --slo ttft_p99=2000,tpot_p99=50ms,success=99.9% --out results/slo
    python -m scenarios search --scenario smoke --over rate --low 2 --slo e2e_p99=1s --repeats 3 --out results/rate

A probe is one level of the scenario's user class, held until it is steady (``--step-time auto``,
``vllm_stress.core.steady``), on a master with workers, into ``OUT/probe-U/run-K`` (``OUT/rate-R/run-K`` over rate); the
analysis measures it with the report's definitions.

* **Over users** (closed loop, the default): the probe runs U users.
* **Over rate** (open loop, ``--over rate``): the probe sends Poisson arrivals at R requests/s
  (``--arrival-rate``, vllm_stress/client/pacing.py) carried by a pool of ``ceil(R × --pool-seconds)`` users — by Little's
  law the pool holds R × e2e requests, so ``--pool-seconds`` must exceed the e2e latency at the answer. A probe
  whose arrivals waited ``vllm_stress.analysis.bound.SCHEDULE_LAG_LIMIT_S`` (p99 of ``schedule_lag_s``) for a free user did not
  send at its rate: it fails, and says to raise ``--pool-seconds``.

With ``--repeats N`` each probe runs N times and is judged on the mean across its runs (``vllm_stress.analysis.stats.
aggregate_repeats``, the report's repeat aggregation): it passes when every run is steady and the mean of every SLO
metric meets its limit; the 95 % confidence interval of each mean is reported beside it, so the answer's margin
can be read against the noise. A probe passes when it is steady, kept its schedule (over rate) and meets every SLO.

The search brackets — the load doubles from ``--low`` until a probe fails or ``--high`` is reached — then bisects
between the highest pass and the lowest fail until they are within ``--precision`` (a share of the pass; over
users at least one user). The answer is the highest pass; its uncertainty is the bracket (the next probe above it
failed) and, with repeats, the CI of the binding SLO's metric at the answer. The binding SLO is the one the
failing probe above the answer misses by the most. The search is bounded by ``--max-probes``, and resumable: a
probe run that already holds a complete run is analysed again, not re-run. With ``--web-port P`` each probe's
master serves Locust's web UI on 127.0.0.1:P (``--autostart``) and its dashboard shows "probe k of at most n" and
the verdict so far.

SLO names are a level field's percentile name (``ttft_p99``, ``tpot_p50``, ``e2e_p90``, ``itl_p99``), a bare number
being milliseconds as in ``vllm bench serve --goodput`` (``s`` and ``ms`` suffixes are understood), or ``success``
(a percentage). A probe that is not steady fails: its numbers are a transient's and certify nothing.
"""

from __future__ import annotations

import json
import logging
import math
import shlex
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

from vllm_stress.analysis import stats
from vllm_stress.analysis.levels import PERCENTILES
from vllm_stress.analysis.load import AnalysisError
from vllm_stress.analysis.report import run_levels
from vllm_stress.core import bound
from vllm_stress.core.slo import SUCCESS_FIELD, Slo, level_slos
from vllm_stress.scenarios.config import read_config, with_overrides
from vllm_stress.scenarios.errors import ScenarioError
from vllm_stress.scenarios.folders import complete, prepare_out
from vllm_stress.scenarios.runner import default_workers, run_locust
from vllm_stress.scenarios.servers import api_headers, launch_args, server

log = logging.getLogger("scenarios")

SLO_METRICS = ("ttft", "tpot", "itl", "e2e")  # a level SLO limits a percentile of one of these
RESULT_FILE = "search.json"
REPORT_FILE = "search.md"
OVER = {"users": (1, 1024), "rate": (1.0, 512.0)}  # what a search varies -> its default --low and --high
UNITS = {"users": "users", "rate": "req/s"}
DEFAULT_POOL_SECONDS = 10.0
LAG_FIELD = "schedule_lag_p99_s"
REPORTED = ("output_tokens_per_s", "requests_per_s", LAG_FIELD)  # level fields every probe reports beside its SLOs


@dataclass
class Space:
    """What a search varies — users (closed loop) or requests/s (open loop) — and its bracket."""

    over: str
    low: float
    high: float
    precision: float
    pool_seconds: float = DEFAULT_POOL_SECONDS

    @property
    def whole(self) -> bool:
        return self.over == "users"

    def users_for(self, load: float) -> int:
        """The users a probe runs: the load itself, or the open loop's pool for its rate."""
        return int(load) if self.whole else max(1, math.ceil(load * self.pool_seconds))

    def folder(self, load: float) -> str:
        return f"probe-{int(load)}" if self.whole else f"rate-{load:g}"

    def label(self, load: float) -> str:
        return f"{int(load)} users" if self.whole else f"{load:g} req/s ({self.users_for(load)} users)"

    def locust_args(self, load: float) -> list[str]:
        rate = [] if self.whole else [f"--arrival-rate={load:g}"]
        return [f"--levels={self.users_for(load)}", *rate]


@dataclass
class Probe:
    load: float  # users (closed loop) or requests/s (open loop)
    users: int  # the users it ran: the load, or the open loop's pool
    passed: bool
    steady: bool
    reason: str  # why it failed ("" when it passed)
    values: dict = field(default_factory=dict)  # SLO name and REPORTED field -> the mean over its runs
    ci95: dict = field(default_factory=dict)  # SLO name -> 95 % CI half-width of that mean (only with repeats)
    runs: int = 1
    missed: list = field(default_factory=list)  # the SLO names it misses


def parse_slos(text: str) -> list[Slo]:
    """'ttft_p99=2000,tpot_p99=50ms,success=99.9%' -> SLOs (vllm_stress.core.slo); a ScenarioError for anything else."""
    try:
        return level_slos(text, SLO_METRICS, PERCENTILES)
    except ValueError as error:
        raise ScenarioError(str(error)) from None


def judge(run_dirs: list[Path], load: float, users: int, slos: list[Slo], space: Space) -> Probe:
    """Analyse one probe's runs (its repeats) against the SLOs, on their mean (see the module docstring)."""
    fields = list(dict.fromkeys([*(slo.field for slo in slos), *REPORTED]))
    per_run = []
    for run, run_dir in enumerate(run_dirs, 1):
        try:
            levels = run_levels(run_dir)
        except AnalysisError as error:
            return Probe(load, users, False, False, f"not measurable: {error}", runs=len(run_dirs))
        if users not in set(levels["users"]):
            return Probe(load, users, False, False, f"run {run}: the level was never held", runs=len(run_dirs))
        per_run.append(levels.reindex(columns=["users", "partial", "steady", "steady_reason", *fields]).assign(run=run))
    rows = pd.concat(per_run, ignore_index=True).astype({name: float for name in fields})
    level = stats.aggregate_repeats(rows).set_index("users").loc[users].to_dict()
    values = {slo.name: level.get(slo.field) for slo in slos} | {name: level.get(name) for name in REPORTED}
    ci95 = {slo.name: level[f"{slo.field}_ci95"] for slo in slos if f"{slo.field}_ci95" in level}
    missed = [slo for slo in slos if not slo.met(level.get(slo.field))]
    probe = Probe(load, users, False, bool(level["steady"]), "", values, ci95, len(run_dirs), [s.name for s in missed])
    lag = level.get(LAG_FIELD)
    reasons = [f"misses {', '.join(slo.describe() for slo in missed)}"] if missed else []
    if not space.whole and lag is not None and lag >= bound.SCHEDULE_LAG_LIMIT_S:
        # the pool was full: the server is past its capacity (the SLOs say so) or the pool is too small for the rate
        reasons.append(
            f"arrivals waited {lag:.1f} s (p99) for a free user"
            + ("" if missed else f": the client could not keep up (raise --pool-seconds above {space.pool_seconds:g})")
        )
    if not probe.steady:
        reasons.append(f"not steady: {level['steady_reason']}")
    probe.reason = "; ".join(reasons)
    probe.passed = not probe.reason
    return probe


def next_load(probes: dict[float, Probe], space: Space) -> float | None:
    """The next load to probe, or None when the answer is found (see the module docstring)."""
    passed = [load for load, p in probes.items() if p.passed]
    failed = [load for load, p in probes.items() if not p.passed]
    best = max(passed, default=None)
    worst = min((load for load in failed if best is None or load > best), default=None)
    if best is None:
        return None if space.low in probes else space.low
    if worst is None:
        return None if best >= space.high else min(best * 2, space.high)
    if worst - best <= max(1 if space.whole else 0, space.precision * best):
        return None
    return (best + worst) // 2 if space.whole else round((best + worst) / 2, 3)


def search(
    name: str,
    out: Path,
    slos: list[Slo],
    *,
    target: str | None = None,
    over: str = "users",
    low: float | None = None,
    high: float | None = None,
    precision: float = 0.1,
    max_probes: int = 12,
    repeats: int = 1,
    pool_seconds: float = DEFAULT_POOL_SECONDS,
    web_port: int = 0,
    workers: int | None = None,
    overwrite: bool = False,
    simulator_args: list[str] | None = None,
    locust_args: list[str] | None = None,
) -> dict:
    """Run the search (see the module docstring); returns what ``search.json`` holds."""
    space = check_space(over, low, high, precision, pool_seconds)
    if repeats < 1 or max_probes < 1:
        raise ScenarioError(f"--repeats and --max-probes must be at least 1, got {repeats} and {max_probes}")
    if not 0 <= web_port <= 65535:
        raise ScenarioError(f"--web-port must be a TCP port (1-65535), got {web_port}")
    config, keys = read_config(name)
    out = out.resolve()
    locust_args = ["--step-time=auto", *(locust_args or [])]
    keys = with_overrides(keys, locust_args)
    if not (out / RESULT_FILE).is_file():  # a search folder is resumed; anything else must be new or overwritten
        prepare_out(out, overwrite)
    probes = {probe.load: probe for probe in load_probes(out, space, repeats)}
    sim_args = shlex.split(keys.get("simulator", "")) + list(simulator_args or [])
    with server(target, sim_args, headers=api_headers(locust_args)) as url:
        launch = launch_args(target, sim_args)
        while (load := next_load(probes, space)) is not None and len(probes) < max_probes:
            run_dirs = [out / space.folder(load) / f"run-{run}" for run in range(1, repeats + 1)]
            for run, run_dir in enumerate(run_dirs, 1):
                if complete(run_dir):
                    continue
                note = progress_note(probes, space, load, len(probes) + 1, max_probes, run, repeats)
                log.info("%s against %s -> %s", note, url, run_dir)
                run_locust(
                    name,
                    config,
                    keys | {"levels": str(space.users_for(load))},
                    url,
                    run_dir,
                    workers or default_workers(),
                    [*locust_args, *space.locust_args(load), "--overwrite", *launch],
                    web_port=web_port,
                    label=note,
                )
            probes[load] = judge(run_dirs, load, space.users_for(load), slos, space)
            log.info("probe at %s: %s", space.label(load), "passes" if probes[load].passed else probes[load].reason)
            write_result(out, name, slos, probes, space, repeats)
    return write_result(out, name, slos, probes, space, repeats)


def check_space(over: str, low: float | None, high: float | None, precision: float, pool_seconds: float) -> Space:
    """The search's Space from the command line, with a clear ScenarioError for values no search can use."""
    if over not in OVER:
        raise ScenarioError(f"--over must be one of {', '.join(OVER)}, got {over!r}")
    low = OVER[over][0] if low is None else low
    high = OVER[over][1] if high is None else high
    if over == "users" and not (float(low).is_integer() and float(high).is_integer()):
        raise ScenarioError(f"--low and --high are whole users over users, got {low:g} and {high:g}")
    if not 0 < low <= high:
        raise ScenarioError(f"--low and --high must be 0 < low <= high, got {low:g} and {high:g}")
    if not 0 < precision < 1 or not pool_seconds > 0:
        raise ScenarioError(
            f"--precision must be between 0 and 1 and --pool-seconds above 0, got {precision:g} and {pool_seconds:g}"
        )
    if over == "users":
        low, high = int(low), int(high)
    return Space(over, low, high, precision, pool_seconds)


def progress_note(
    probes: dict[float, Probe], space: Space, load: float, number: int, max_probes: int, run: int, repeats: int
) -> str:
    """'SLO search probe 3 of at most 12: 48 users, run 1 of 1; so far 32 users passes, 64 users fails (...)': the
    line before each probe's progress lines (--run-label: its console, LLM tab and dashboard) and the log prints."""
    note = f"SLO search probe {number} of at most {max_probes}: {space.label(load)}, run {run} of {repeats}"
    best, above = bracket(probes)
    verdicts = [f"{space.label(best.load)} passes"] if best else []
    verdicts += [f"{space.label(above.load)} fails ({above.reason})"] if above else []
    return note + ("; so far " + ", ".join(verdicts) if verdicts else "; no verdict yet")


def bracket(probes: dict[float, Probe]) -> tuple[Probe | None, Probe | None]:
    """The highest passing probe and the lowest failing one above it (either may be None)."""
    ordered = sorted(probes.values(), key=lambda probe: probe.load)
    best = max((p for p in ordered if p.passed), key=lambda probe: probe.load, default=None)
    above = next((p for p in ordered if not p.passed and (best is None or p.load > best.load)), None)
    return best, above


def load_probes(out: Path, space: Space, repeats: int) -> list[Probe]:
    """The probes of the search folder being resumed; a folder of another kind of search is refused."""
    path = out / RESULT_FILE
    if not path.is_file():
        return []
    result = json.loads(path.read_text())
    if (result.get("over"), result.get("repeats")) != (space.over, repeats):
        raise ScenarioError(
            f"{out} holds a search over {result.get('over')} with {result.get('repeats')} repeat(s), "
            f"not over {space.over} with {repeats}: choose another --out"
        )
    return [Probe(**probe) for probe in result["probes"]]


def binding(slos: list[Slo], best: Probe | None, above: Probe | None) -> dict | None:
    """The SLO that binds — the one the failing probe above the answer misses by the most — with its mean and CI at
    the answer and above it."""
    missed = [slo for slo in slos if above and slo.name in above.missed]
    if not missed:
        return None
    slo = max(missed, key=lambda s: s.excess(above.values[s.name]))
    at = {"answer": best, "above": above}
    return {"slo": slo.name, "limit": slo.limit} | {
        f"{key}_{part}": (probe.values if part == "value" else probe.ci95).get(slo.name) if probe else None
        for key, probe in at.items()
        for part in ("value", "ci95")
    }


def write_result(out: Path, name: str, slos: list[Slo], probes: dict[float, Probe], space: Space, repeats: int) -> dict:
    """search.json and search.md: every probe, the answer and its bracket, the SLO that binds."""
    best, above = bracket(probes)
    result = {
        "scenario": name,
        "over": space.over,
        "repeats": repeats,
        "pool_seconds": None if space.whole else space.pool_seconds,
        "slo": [asdict(slo) for slo in slos],
        "probes": [asdict(p) for p in sorted(probes.values(), key=lambda probe: probe.load)],
        "answer": best.load if best else None,
        "answer_users": best.users if best else None,
        "next_failing": above.load if above else None,
        "failing_reason": above.reason if above else "",
        "binding": binding(slos, best, above),
        "finished": next_load(probes, space) is None,
    }
    (out / RESULT_FILE).write_text(json.dumps(result, indent=2, default=float) + "\n")
    (out / REPORT_FILE).write_text(markdown(result, slos, space))
    return result


def markdown(result: dict, slos: list[Slo], space: Space) -> str:
    what = "concurrency" if space.whole else "arrival rate"
    if result["answer"] is None:
        answer = f"No probed {what} met every SLO."
    else:
        answer = f"The highest {what} that meets every SLO: **{space.label(result['answer'])}**"
        if result["next_failing"] is not None:
            answer += f" ({space.label(result['next_failing'])} does not: {result['failing_reason']})"
        answer += "." if result["finished"] else " (search not finished: raise --max-probes)."
    lines = ["# SLO search", "", f"SLOs: {', '.join(slo.describe() for slo in slos)}.", "", answer, ""]
    lines += uncertainty(result, space)
    header = ["Rate (req/s)", "Users (pool)", "Arrival wait p99"] if not space.whole else ["Users"]
    header += ["Runs", "Steady", "Output tok/s", *(slo.name for slo in slos), "Verdict"]
    lines += ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for probe in result["probes"]:
        values, ci95 = probe["values"], probe["ci95"]
        cells = (
            [f"{probe['load']:g}", str(probe["users"]), ms(values.get(LAG_FIELD))]
            if not space.whole
            else [str(probe["users"])]
        )
        cells += [str(probe["runs"]), "yes" if probe["steady"] else "no", fmt(values.get("output_tokens_per_s"), 0)]
        cells += [value_text(slo, values.get(slo.name), ci95.get(slo.name)) for slo in slos]
        cells.append("passes" if probe["passed"] else probe["reason"])
        lines.append("| " + " | ".join(cells) + " |")
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
    return "\n".join(lines) + "\n"


def uncertainty(result: dict, space: Space) -> list[str]:
    """The answer's uncertainty: the bracket, and the binding SLO at the answer with its CI (with repeats)."""
    if result["answer"] is None:
        return []
    upper = space.label(result["next_failing"]) if result["next_failing"] is not None else "nothing failed yet"
    lines = [f"Uncertainty: the capacity lies between {space.label(result['answer'])} (passes) and {upper}."]
    bind = result["binding"]
    if bind:
        slo = next(s for s in (Slo(**d) for d in result["slo"]) if s.name == bind["slo"])
        lines[0] += (
            f" The binding SLO is {slo.describe()}: {value_text(slo, bind['answer_value'], bind['answer_ci95'])}"
            f" at the answer, {value_text(slo, bind['above_value'], bind['above_ci95'])} above it."
        )
    return [*lines, ""]


def value_text(slo: Slo, value, ci95) -> str:
    spread = (
        "" if ci95 is None or math.isnan(ci95) else " ± " + (fmt(ci95, 4) if slo.field == SUCCESS_FIELD else ms(ci95))
    )
    return (fmt(value, 4) if slo.field == SUCCESS_FIELD else ms(value)) + spread


def ms(seconds) -> str:
    return "-" if seconds is None or math.isnan(seconds) else f"{seconds * 1000:,.1f} ms"


def fmt(value, digits: int) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:,.{digits}f}"
