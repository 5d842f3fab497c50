"""The report per traffic class (``--traffic-class``, vllm_stress.core.classes): each class's level rows, made by the
one per-level definition (``levels.level_stats`` on the class's rows, its goodput by the class's own SLO), the
fairness across the classes at each level, and the verdict when one class starves another.

Fairness is Jain's index, (Σx)² / (n·Σx²), of the classes' SLO attainment x (the share of a class's requests within
every per-request limit of its SLO, its goodput_ratio): 1 when every class is served as well by its own yardstick,
1/n when one class alone is. Attainment, not throughput: classes ask for different amounts of work (a 4,096-token
prompt is not a 256-token one), so equal throughputs would not be fair; each class's SLO already says what being
served well means for it. Classes without an SLO are left out of the index."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypedDict

import pandas as pd

from vllm_stress.analysis.features.pooling import kind_of
from vllm_stress.analysis.io.json_types import to_json_types
from vllm_stress.analysis.io.load import AnalysisError, Run
from vllm_stress.analysis.measures import HEADLINE, LATENCY_METRICS, PERCENTILES
from vllm_stress.analysis.report.render import Block, Bullets, Heading, Paragraph, Table
from vllm_stress.core.classes import TrafficClass, from_json
from vllm_stress.core.numbers import count, percent, seconds
from vllm_stress.core.slo import Slo, level_slos, request_slos

LevelStats = Callable[[Run, pd.DataFrame, dict[str, float] | None], pd.DataFrame]  # run, windows, SLO -> level rows
CLASS_FIELDS = ("users", "requests", *HEADLINE, "goodput_requests_per_s", "goodput_ratio")  # kept per class
POOLING_FIELDS = ("inputs_per_s", "input_tokens_per_s")  # a pooling class's too: its API's (features/pooling.py)


class ClassesSummary(TypedDict):
    """summary.json's ``classes`` of a config: the declared classes, their level rows (the mean over repeats), the
    fairness per level and the starvation verdicts."""

    declared: list[dict[str, Any]]
    # {"class", "endpoint", "share", "slo_met", "token_share", *CLASS_FIELDS, *POOLING_FIELDS}
    levels: list[dict[str, Any]]
    fairness: list[dict[str, Any]]  # {"users", "jain_slo_attainment"}
    verdicts: list[str]


def declared_classes(run: Run) -> list[TrafficClass]:
    """The run's classes: run.json's, else the names its rows carry (no weights, no SLOs)."""
    if run.meta.get("traffic_classes"):
        return from_json(run.meta["traffic_classes"])
    named = run.requests.get("class")
    names = [] if named is None else sorted({str(name) for name in named.dropna() if str(name)})
    return [TrafficClass(name) for name in names]


def only_class(run: Run, name: str) -> Run:
    """The run with only the rows of class ``name`` (compare --class); AnalysisError when it has none."""
    rows = run.requests[run.requests["class"].fillna("").astype(str) == name]
    if rows.empty:
        known = ", ".join(c.name for c in declared_classes(run)) or "none"
        raise AnalysisError(f"{run.path}: no request of class {name!r} (its classes: {known})")
    return replace(run, requests=rows.reset_index(drop=True))


def class_level_rows(run: Run, windows: pd.DataFrame, level_stats: LevelStats) -> pd.DataFrame:
    """One row per class and level of one run (empty without classes), by ``level_stats`` (levels.level_stats)."""
    classes = declared_classes(run)
    frames = []
    for traffic_class in classes:
        rows = run.requests[run.requests["class"].fillna("").astype(str) == traffic_class.name]
        if rows.empty:
            continue
        slo = {s.name: s.limit for s in request_slos(traffic_class.slo, LATENCY_METRICS)} if traffic_class.slo else {}
        stats = subset_levels(run, rows, windows, level_stats, slo or None)
        frames.append(class_fields(stats, rows).assign(**{"class": traffic_class.name}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def subset_levels(
    run: Run, rows: pd.DataFrame, windows: pd.DataFrame, level_stats: LevelStats, slo: dict[str, float] | None = None
) -> pd.DataFrame:
    """The level rows of ``rows``, some of the run's requests (a class's, an endpoint's), by ``level_stats`` over the
    run's windows, without the run's other tables (the server's and the GPUs' figures are the whole server's)."""
    return level_stats(replace(run, requests=rows.reset_index(drop=True), tables={}), windows, slo)


def class_fields(stats: pd.DataFrame, rows: pd.DataFrame) -> pd.DataFrame:
    """The fields kept of a class's level rows: CLASS_FIELDS, the ``endpoint`` its rows went to and, for a pooling
    class (its rows all a pooling API's), that API's inputs and input tokens per second."""
    kept = stats.reindex(columns=list(CLASS_FIELDS)).astype(float).astype({"users": int})
    kind = kind_of(rows)
    for field in POOLING_FIELDS:
        kept[field] = stats[f"{kind}_{field}"].astype(float) if kind else math.nan
    return kept.assign(endpoint=", ".join(sorted(set(rows["endpoint"].dropna().astype(str)))))


def judged(traffic_class: TrafficClass) -> list[Slo]:
    """The class's SLO as a level is judged (a bare metric is its p99), [] without one."""
    return level_slos(traffic_class.slo, LATENCY_METRICS, PERCENTILES) if traffic_class.slo else []


def level_met(slos: list[Slo], level: Mapping[Any, Any]) -> bool | None:
    """Whether a class's level meets every limit of its SLO (None without an SLO)."""
    return all(s.met(level.get(s.field)) for s in slos) if slos else None


def jain(values: list[float]) -> float | None:
    """Jain's fairness index of ``values`` (None for fewer than two, or all zero)."""
    values = [v for v in values if v is not None and not math.isnan(v)]
    squares = sum(v * v for v in values)
    if len(values) < 2 or not squares:
        return None
    return sum(values) ** 2 / (len(values) * squares)


def summarise_classes(per_run: list[pd.DataFrame], classes: list[TrafficClass]) -> ClassesSummary | None:
    """The config's classes from each run's ``class_level_rows``; None when its runs had no classes."""
    frames = [frame for frame in per_run if not frame.empty]
    if not frames:
        return None
    rows = pd.concat(frames).groupby(["class", "users", "endpoint"], as_index=False, sort=False).mean(numeric_only=True)
    weights = {c.name: c.weight for c in classes}
    total_weight = sum(weights.get(name, 1.0) for name in rows["class"].unique())
    rows["share"] = rows["class"].map(lambda name: weights.get(name, 1.0) / total_weight)
    tokens = rows.groupby("users")["total_tokens_per_s"].transform("sum")
    rows["token_share"] = rows["total_tokens_per_s"] / tokens.where(tokens > 0)
    slos = {c.name: judged(c) for c in classes}
    rows["slo_met"] = [level_met(slos.get(r["class"], []), r) for r in rows.to_dict("records")]
    with_slo = rows[rows["class"].map(lambda name: bool(slos.get(name)))]
    fairness = [
        {"users": users, "jain_slo_attainment": jain(level["goodput_ratio"].tolist())}
        for users, level in with_slo.groupby("users")
    ]
    summary = {
        "declared": [c.as_json() for c in classes],
        "levels": rows.sort_values(["users", "class"]).to_dict("records"),
        "fairness": fairness,
        "verdicts": starvation(rows, slos),
    }
    return to_json_types(summary)  # type: ignore[return-value]  # its JSON form: NaN as None


def starvation(rows: pd.DataFrame, slos: dict[str, list[Slo]]) -> list[str]:
    """Per level, each class that missed its SLO while another took more of the server's tokens than its share of the
    users: "batch took 92.0 % of the tokens at 64 users (25.0 % of the users) while interactive missed ttft_p99 ≤ 500
    ms"."""
    verdicts = []
    for users, level in rows.groupby("users", sort=True):
        for missed in level[level["slo_met"] == False].to_dict("records"):  # noqa: E712 (None: no SLO)
            others = level[level["class"] != missed["class"]]
            if others.empty or others["token_share"].isna().all():
                continue
            taker = others.loc[others["token_share"].idxmax()]
            if taker["token_share"] > taker["share"]:
                limits = ", ".join(s.describe() for s in slos[missed["class"]] if not s.met(missed.get(s.field)))
                verdicts.append(
                    f"{taker['class']} took {percent(taker['token_share'])} of the tokens at {users} users "
                    f"({percent(taker['share'])} of the users) while {missed['class']} missed {limits}"
                )
    return verdicts


CLASSES_NOTE = (
    "Each class's figures are the per-level figures of its own requests; attainment is the share of them within "
    "every limit of the class's SLO (its goodput ratio), SLO met judges the level (a bare metric is its p99). "
    "Fairness: Jain's index of the classes' attainments (1: all served alike by their own SLO; docs/guides/"
    "traffic-classes.md). A pooling class (api=embeddings, rerank, score) generates nothing: its own figures are its "
    "inputs (texts or documents) and their prompt tokens per second, its latency e2e."
)


def class_cells(level: Mapping[str, Any]) -> dict[str, str]:
    """A class's level by column: its own figures (a generating class's output tokens, TTFT and TPOT; a pooling
    class's inputs and input tokens, features/pooling.py's), the requests and e2e of both, its SLO's verdict."""
    own = (
        {"inputs/s": count(level["inputs_per_s"], 1), "input tok/s": count(level["input_tokens_per_s"])}
        if level.get("inputs_per_s") is not None
        else {
            "output tok/s": count(level["output_tokens_per_s"]),
            "TTFT p50": seconds(level["ttft_p50_s"]),
            "TTFT p99": seconds(level["ttft_p99_s"]),
            "TPOT p50": seconds(level["tpot_p50_s"]),
        }
    )
    return own | {
        "users": str(level["users"]),
        "class": level["class"],
        "endpoint": level.get("endpoint") or "",
        "req/s": count(level["requests_per_s"], 2),
        "e2e p50": seconds(level["e2e_p50_s"]),
        "e2e p99": seconds(level["e2e_p99_s"]),
        "attainment": percent(level["goodput_ratio"]),
        "SLO met": {True: "yes", False: "no", None: ""}[level["slo_met"]],
    }


def class_headers(pooled: bool) -> list[str]:
    """The table's columns, with the endpoint and a pooling class's when ``pooled`` (a mixed fleet)."""
    api, inputs = (["endpoint"], ["inputs/s", "input tok/s"]) if pooled else ([], [])
    generated = ["output tok/s", "TTFT p50", "TTFT p99", "TPOT p50"]
    return ["users", "class", *api, "req/s", *generated, *inputs, "e2e p50", "e2e p99", "attainment", "SLO met"]


def class_blocks(label: str, classes: ClassesSummary | None) -> list[Block]:
    """The per-class table of a config, its fairness and verdicts; [] without classes."""
    if not classes:
        return []
    headers = class_headers(any(level.get("inputs_per_s") is not None for level in classes["levels"]))
    rows = [[cells.get(header, "") for header in headers] for cells in map(class_cells, classes["levels"])]
    fairness = [
        f"{f['users']} users: Jain's index {f['jain_slo_attainment']:.3f}"
        for f in classes["fairness"]
        if f["jain_slo_attainment"] is not None
    ]
    blocks: list[Block] = [Heading(f"Traffic classes: {label}"), Paragraph(CLASSES_NOTE), Table(headers, rows)]
    return blocks + [Bullets(fairness + classes["verdicts"])] if fairness or classes["verdicts"] else blocks
