"""The peak and saturation point per endpoint: when a config's runs sent requests to two or more APIs (several
locustfiles at once, traffic classes with ``api=``), each endpoint's level rows by the one per-level definition
(levels.level_stats on its own rows, class_levels.subset_levels) averaged over the repeats, its throughput in its own
unit and, over its steady levels, its peak and saturation point by the run's own rules (stats.peak_level,
stats.saturation_users); the report's table of them (docs/guides/endpoints.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypedDict

import pandas as pd

from vllm_stress.analysis.features import Config, ConfigInput
from vllm_stress.analysis.features.class_levels import subset_levels
from vllm_stress.analysis.features.pooling import KINDS
from vllm_stress.analysis.io.load import Run
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.capacity import SATURATION_TOLERANCE
from vllm_stress.core.numbers import count, percent

POOLED = tuple(f"{kind}_inputs_per_s" for kind in KINDS)  # the pooling feature's inputs per second of each API
AUDIO = "audio_s_per_s"  # the audio feature's audio seconds per second
OWN_FIELDS = (*POOLED, AUDIO)  # an endpoint's throughput when it has one, before the run's own rule
UNITS = dict.fromkeys(POOLED, "inputs/s") | {
    AUDIO: "audio s/s",
    "output_tokens_per_s": "output tok/s",
    "requests_per_s": "requests/s",
}


class EndpointPeak(TypedDict):
    """summary.json's ``endpoints`` entry: an endpoint's peak level and saturation point (None: no steady level)."""

    endpoint: str
    unit: str
    peak_users: int | None
    peak: float | None
    saturation_users: int | None


def endpoints(run: Run) -> set[str]:
    """The API paths the run's rows went to."""
    return set(run.requests["endpoint"].dropna().astype(str)) - {""}


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``endpoints``: each endpoint's peak and saturation point when the runs sent to two or more, else []."""
    names = sorted(set().union(*(endpoints(run.run) for run in config.runs)))
    if len(names) < 2:
        return {"endpoints": []}
    return {"endpoints": [endpoint_peak(name, endpoint_levels(name, config)) for name in names]}


def endpoint_levels(name: str, config: ConfigInput) -> pd.DataFrame:
    """The level rows of each run's requests to endpoint ``name`` (column ``run``: the run's index)."""
    return pd.concat(
        subset_levels(run.run, rows, run.windows, config.level_stats).assign(run=index)
        for index, run in enumerate(config.runs)
        if not (rows := run.run.requests[run.run.requests["endpoint"] == name]).empty
    )


def endpoint_peak(name: str, per_run: pd.DataFrame) -> EndpointPeak:
    """The endpoint's peak level and saturation point over its steady levels (averaged over the repeats), its
    throughput in its own unit: a pooling API's inputs/s, an audio API's audio seconds per second, else the run's
    own (output tok/s, or requests/s without token counts)."""
    from vllm_stress.analysis import stats  # above levels, which imports this module: imported in the hook

    levels = stats.aggregate_repeats(per_run)
    field = next((field for field in OWN_FIELDS if levels[field].notna().any()), stats.throughput_field(levels))
    steady = stats.steady_levels(levels).dropna(subset=[field])
    if steady.empty:
        return EndpointPeak(endpoint=name, unit=UNITS[field], peak_users=None, peak=None, saturation_users=None)
    peak = stats.peak_level(steady, field)
    return EndpointPeak(
        endpoint=name,
        unit=UNITS[field],
        peak_users=int(peak["users"]),
        peak=float(peak[field]),
        saturation_users=stats.saturation_users(steady, field),
    )


def used(config: Config) -> bool:
    """The runs sent to two or more endpoints (with one, the run's own peak is the endpoint's)."""
    return bool(config.get("endpoints"))


def phrase(entry: Mapping[str, Any]) -> str:
    if entry["peak"] is None:
        return f"{entry['endpoint']} reached no steady level"
    return (
        f"{entry['endpoint']} peaks at {count(entry['peak'], 1)} {entry['unit']} at {entry['peak_users']} users and "
        f"saturates at {entry['saturation_users']}"
    )


def overview(label: str, config: Config) -> list[str]:
    return [f"{label} per endpoint: {'; '.join(map(phrase, config['endpoints']))}."]


NOTE = (
    "Each endpoint's own requests, measured as the run's (the per-level definition on its rows alone): its "
    "throughput in its own unit (output tok/s for the generating APIs, inputs/s for embeddings, rerank and score, "
    "audio s/s for audio, requests/s without token counts); its peak is its best steady level, its saturation "
    f"point the smallest steady level within {percent(SATURATION_TOLERANCE)} of that best."
)
HEADERS = ["endpoint", "unit", "peak at (users)", "peak", "saturation at (users)"]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    """The table of the endpoints' peaks and saturation points."""
    return [Heading(f"Peak and saturation per endpoint: {label}"), Paragraph(NOTE), Table(HEADERS, rows(config))]


def rows(config: Config) -> list[list[str]]:
    return [
        [e["endpoint"], e["unit"], count(e["peak_users"]), count(e["peak"], 1), count(e["saturation_users"])]
        for e in config["endpoints"]
    ]
