"""The comparison of a baseline and a candidate: per level, how each headline metric changed, whether the change is
outside the noise, and the ``--fail-on`` regression gate (docs/concepts/analysis.md, "Comparing and gating")."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from vllm_stress.analysis import stats
from vllm_stress.analysis.features.canary_answers import canary_levels, read_answers
from vllm_stress.analysis.features.spec_counters import ACCEPTED_LENGTH
from vllm_stress.analysis.io import llmd, store, vllm_json
from vllm_stress.analysis.io.load import AnalysisError, read_meta
from vllm_stress.analysis.report.pipeline import run_levels
from vllm_stress.core import schema
from vllm_stress.core.capacity import usd_per_million_tokens
from vllm_stress.core.numbers import dollars
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
    "canary_agreement": "canary_agreement",  # a run folder's canaries (analysis.canaries): share agreeing, 0..1
    "spec_accepted_len": ACCEPTED_LENGTH,  # speculative decoding: the server's tokens per verifying step
}
SINGLE_RUN_MIN_EFFECT = RATE_TOLERANCE
STORE_PREFIX = "db:"
LIMIT = re.compile(r"^\s*(\w+)\s*([<>])\s*([+-]?[0-9]*\.?[0-9]+)\s*%\s*$")
SIDES = ("baseline", "candidate")
TWIN_PREFIX = "twin calibrated on "  # how a side's server text starts when a calibrated twin served the run


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


@dataclass(frozen=True)
class Noise:
    """Whether a change is outside the noise, and the test that says so."""

    ci95: float | None  # half-width of the 95 % CI of the change (Welch), None with a single run on a side
    significant: bool
    test: str


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


@dataclass(frozen=True)
class Pricing:
    """What a side's deployment costs: its GPUs and their $ per GPU-hour (compare --gpus, --gpu-hour-price)."""

    gpus: int
    gpu_hour_price: float

    def __str__(self) -> str:
        return f"{self.gpus} GPUs at {dollars(self.gpu_hour_price)}/h"


@dataclass(frozen=True)
class Cost:
    """What a million output tokens cost at one level on each side (COST_FIELDS' usd_per_m_output_tokens, from the
    level's mean output tok/s), and the change."""

    users: int
    baseline: float
    candidate: float
    change: float  # candidate - baseline
    relative: float  # change / baseline


@dataclass
class Side:
    """One side of a comparison: its sources, their levels (``aggregate``) and the servers its runs name."""

    sources: list[str]
    levels: pd.DataFrame
    servers: list[str]


@dataclass
class Comparison:
    """Both sides, the limits, every difference and the levels that do not gate (users -> why)."""

    baseline: Side
    candidate: Side
    fail_on: list[str]
    differences: list[Difference]
    ungated: dict[int, str]
    pricing: dict[str, Pricing] | None = None  # side -> its GPUs and price, when priced
    costs: list[Cost] = dataclasses.field(default_factory=list)  # per level on both sides, when priced

    @property
    def regressions(self) -> list[Difference]:
        return [difference for difference in self.differences if difference.regression]

    @property
    def compared_users(self) -> list[int]:
        return sorted({difference.users for difference in self.differences})

    def side(self, name: str) -> Side:
        return self.baseline if name == "baseline" else self.candidate

    @property
    def twin_sides(self) -> list[str]:
        """The sides some of whose runs were served by a calibrated twin (run.json's server_twin)."""
        return [side for side in SIDES if any(text.startswith(TWIN_PREFIX) for text in self.side(side).servers)]

    def twin_line(self) -> str:
        """ "twin vs real" (or real vs twin, twin vs twin) when a side is a twin, else ""."""
        if not self.twin_sides:
            return ""
        return " vs ".join("twin" if side in self.twin_sides else "real" for side in SIDES)

    @property
    def servers_differ(self) -> bool:
        """Both sides name their servers (run.json's server_version and server_launch), and not the same ones."""
        baseline, candidate = self.baseline.servers, self.candidate.servers
        return bool(baseline and candidate and baseline != candidate)


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


def source_levels(source: str, db: str | None, traffic_class: str = "") -> list[pd.DataFrame]:
    """The per-level rows of each run a source holds: a stored run, a vLLM result file or folder, or a run folder;
    with ``traffic_class``, a run folder's rows of that class (the others hold no class)."""
    if traffic_class:
        if source.startswith(STORE_PREFIX) or vllm_json.result_files(source) or Path(source).is_file():
            raise AnalysisError(f"{source}: --class compares run folders (their rows carry the class)")
        return [run_levels(source, traffic_class)]
    if source.startswith(STORE_PREFIX):
        return [store.run_levels(db, source.removeprefix(STORE_PREFIX))]
    if reports := llmd.report_files(source):  # llm-d Benchmark Reports
        return llmd.read_reports(reports)
    if Path(source).is_file():
        return vllm_json.read_results(source)
    if files := vllm_json.result_files(source):
        return [level for path in files for level in vllm_json.read_results(path)]
    return [with_canary_agreement(run_levels(source), Path(source))]


def with_canary_agreement(levels: pd.DataFrame, folder: Path) -> pd.DataFrame:
    """A run's levels with ``canary_agreement``, its canaries' agreement with its lowest level (NaN without them)."""
    agreement = {level["users"]: level["agreement"] for level in canary_levels(read_answers([folder]))}
    return levels.assign(canary_agreement=levels["users"].map(agreement).astype(float))


def load_side(sources: list[str], db: str | None, traffic_class: str = "") -> pd.DataFrame:
    """The per-run level rows of a side's sources (column ``run`` numbers the runs, repeats of one config); with
    ``traffic_class``, of that class's requests."""
    frames: list[pd.DataFrame] = []
    for source in sources:
        found = source_levels(source, db, traffic_class)
        frames += [frame.assign(run=len(frames) + index) for index, frame in enumerate(found)]
    columns = [*stats.NOT_AVERAGED, *METRICS.values()]
    return pd.concat([frame.reindex(columns=columns) for frame in frames], ignore_index=True)


def side_servers(sources: list[str], db: str | None) -> list[str]:
    """The distinct servers of a side's runs, each as "version X, launched with ..." (run.json's server_version and
    server_launch; a vllm bench serve result names none)."""
    servers: list[str] = []
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
        twin = meta.get("server_twin")
        text = f"{TWIN_PREFIX}{twin['source']} ({twin['error']}), " if twin else ""
        text += f"version {meta.get('server_version') or 'unknown'}"
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


def noise(base: pd.Series, cand: pd.Series, field: str) -> Noise:
    """Whether one metric's change at one level is outside the noise: Welch's test with repeats on both sides, else
    (a single run, or a metric only one of a side's runs has) the minimum effect."""
    runs = int(base["runs"]), int(cand["runs"])
    change = float(cand[field] - base[field])
    if min(runs) < 2 or pd.isna(base[f"{field}_std"]) or pd.isna(cand[f"{field}_std"]):
        relative = abs(change / base[field]) if base[field] else math.inf
        return Noise(None, relative >= SINGLE_RUN_MIN_EFFECT, f"minimum effect {SINGLE_RUN_MIN_EFFECT:.0%}")
    half_width = stats.welch_ci95(float(base[f"{field}_std"]), runs[0], float(cand[f"{field}_std"]), runs[1])
    return Noise(half_width, abs(change) > half_width, "Welch t")


def level_differences(users: int, base: pd.Series, cand: pd.Series, limits: list[Limit]) -> list[Difference]:
    """Every metric both sides have at one level."""
    result = []
    for metric, field in METRICS.items():
        if pd.isna(base[field]) or pd.isna(cand[field]):
            continue
        change = float(cand[field] - base[field])
        relative = change / base[field] if base[field] else math.copysign(math.inf, change) if change else 0.0
        verdict = noise(base, cand, field)
        crossed = [str(limit) for limit in limits if limit.metric == metric and limit.crossed(relative)]
        result.append(
            Difference(
                users=users,
                metric=metric,
                baseline=float(base[field]),
                candidate=float(cand[field]),
                baseline_runs=int(base["runs"]),
                candidate_runs=int(cand["runs"]),
                change=change,
                relative=relative,
                ci95=verdict.ci95,
                test=verdict.test,
                significant=verdict.significant,
                gated=bool(base["steady"] and cand["steady"]),
                crossed=crossed,
            )
        )
    return result


def differences(baseline: pd.DataFrame, candidate: pd.DataFrame, limits: list[Limit]) -> list[Difference]:
    """Every metric at every level present on both sides."""
    return [
        difference
        for users in sorted(set(baseline.index) & set(candidate.index))
        for difference in level_differences(int(users), baseline.loc[users], candidate.loc[users], limits)
    ]


def compare(
    baseline_sources: list[str],
    candidate_sources: list[str],
    limits: list[Limit],
    db: str | None = None,
    pricing: dict[str, Pricing] | None = None,
    traffic_class: str = "",
) -> Comparison:
    """The comparison of the two sides' sources under ``limits``, with the cost per million output tokens at each
    level when ``pricing`` prices both sides (``traffic_class``: of that class's requests on both sides);
    AnalysisError when no level is on both sides."""
    baseline, candidate = (
        Side(sources, aggregate(load_side(sources, db, traffic_class)), side_servers(sources, db))
        for sources in (baseline_sources, candidate_sources)
    )
    common = sorted(set(baseline.levels.index) & set(candidate.levels.index))
    if not common:
        raise AnalysisError(
            f"no level in both sides (baseline {sorted(baseline.levels.index)}, "
            f"candidate {sorted(candidate.levels.index)})"
        )
    ungated = {
        int(users): reason
        for users in common
        if (reason := ungated_reason(baseline.levels.loc[users], candidate.levels.loc[users]))
    }
    found = differences(baseline.levels, candidate.levels, limits)
    costs = (
        [level_cost(users, baseline.levels.loc[users], candidate.levels.loc[users], pricing) for users in common]
        if pricing
        else []
    )
    return Comparison(baseline, candidate, [str(limit) for limit in limits], found, ungated, pricing, costs)


def level_cost(users: int, base: pd.Series, cand: pd.Series, pricing: dict[str, Pricing]) -> Cost:
    """$ per million output tokens at one level on both sides, each side at its own GPUs and price (NaN without
    output tok/s)."""
    field = METRICS["output_tok_s"]
    costs = [
        usd_per_million_tokens(float(level[field]), side.gpu_hour_price, side.gpus)
        for level, side in ((base, pricing["baseline"]), (cand, pricing["candidate"]))
    ]
    return Cost(users, costs[0], costs[1], costs[1] - costs[0], (costs[1] - costs[0]) / costs[0])


def ungated_reason(base: pd.Series, cand: pd.Series) -> str:
    """Why a level does not gate: which side was not steady, and its reason ("" when both were)."""
    return "; ".join(
        f"{side} not steady ({level['steady_reason']})"
        for side, level in zip(SIDES, (base, cand), strict=True)
        if not level["steady"]
    )
