"""Judging one probe of the SLO search: its runs measured with the report's definitions, and the mean over them held
against every SLO, the steady-state rule and (over rate) the arrival schedule."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_stress.analysis import stats
from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.analysis.measures import PERCENTILES
from vllm_stress.analysis.report.pipeline import run_levels
from vllm_stress.core import bound
from vllm_stress.core.slo import Slo, level_slos
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.search.space import Space

SLO_METRICS = ("ttft", "tpot", "itl", "e2e")  # a level SLO limits a percentile of one of these
LAG_FIELD = "schedule_lag_p99_s"
REPORTED = ("output_tokens_per_s", "requests_per_s", LAG_FIELD)  # level fields every probe reports beside its SLOs


@dataclass
class Probe:
    load: float  # users (closed loop) or requests/s (open loop)
    users: int  # the users it ran: the load, or the open loop's pool
    passed: bool
    steady: bool
    reason: str  # why it failed ("" when it passed)
    values: dict[str, float | None] = field(default_factory=dict)  # SLO name and REPORTED field -> mean over runs
    ci95: dict[str, float] = field(default_factory=dict)  # SLO name -> 95 % CI half-width of that mean (repeats)
    runs: int = 1
    missed: list[str] = field(default_factory=list)  # the SLO names it misses


class Unmeasured(Exception):
    """A probe whose runs give no level to judge; the message says why."""


def parse_slos(text: str) -> list[Slo]:
    """'ttft_p99=2000,tpot_p99=50ms,success=99.9%' -> SLOs (vllm_stress.core.slo); a ScenarioError for anything else."""
    try:
        return level_slos(text, SLO_METRICS, PERCENTILES)
    except ValueError as error:
        raise ScenarioError(str(error)) from None


def judge(run_dirs: list[Path], load: float, users: int, slos: list[Slo], space: Space) -> Probe:
    """One probe's runs (its repeats) against the SLOs, on their mean (docs/concepts/scenarios.md)."""
    fields = list(dict.fromkeys([*(slo.field for slo in slos), *REPORTED]))
    try:
        level = mean_level(run_dirs, users, fields)
    except Unmeasured as error:
        return Probe(load, users, False, False, str(error), runs=len(run_dirs))
    missed = [slo for slo in slos if not slo.met(level.get(slo.field))]
    reasons = failures(level, missed, space)
    return Probe(
        load,
        users,
        passed=not reasons,
        steady=bool(level["steady"]),
        reason="; ".join(reasons),
        values={slo.name: level.get(slo.field) for slo in slos} | {name: level.get(name) for name in REPORTED},
        ci95={slo.name: level[f"{slo.field}_ci95"] for slo in slos if f"{slo.field}_ci95" in level},
        runs=len(run_dirs),
        missed=[slo.name for slo in missed],
    )


def mean_level(run_dirs: list[Path], users: int, fields: list[str]) -> dict[str, Any]:
    """The level of ``users`` users over the runs (the report's repeat aggregation: means, and CIs with repeats)."""
    per_run = []
    for run, run_dir in enumerate(run_dirs, 1):
        try:
            levels = run_levels(run_dir)
        except AnalysisError as error:
            raise Unmeasured(f"not measurable: {error}") from None
        if users not in set(levels["users"]):
            raise Unmeasured(f"run {run}: the level was never held")
        per_run.append(levels.reindex(columns=["users", "partial", "steady", "steady_reason", *fields]).assign(run=run))
    rows = pd.concat(per_run, ignore_index=True).astype({name: float for name in fields})
    level = stats.aggregate_repeats(rows).set_index("users").loc[users]
    return {str(name): value for name, value in level.items()}


def failures(level: dict[str, Any], missed: list[Slo], space: Space) -> list[str]:
    """Why the probe fails: the SLOs it misses, arrivals that waited for a free user (over rate), not steady."""
    reasons = [f"misses {', '.join(slo.describe() for slo in missed)}"] if missed else []
    lag = level.get(LAG_FIELD)
    if not space.whole and lag is not None and lag >= bound.SCHEDULE_LAG_LIMIT_S:
        # the pool was full: the server is past its capacity (the SLOs say so) or the pool is too small for the rate
        reasons.append(
            f"arrivals waited {lag:.1f} s (p99) for a free user"
            + ("" if missed else f": the client could not keep up (raise --pool-seconds above {space.pool_seconds:g})")
        )
    if not level["steady"]:
        reasons.append(f"not steady: {level['steady_reason']}")
    return reasons
