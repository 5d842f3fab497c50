"""Embeddings and rerank in the analysis: per level and per pooling endpoint (embeddings, rerank, score: the last
part of the rows' endpoint, so /rerank and /v1/rerank are one), the measured requests, inputs and prompt tokens that ended in the level's window per second (the rule of
requests_per_s: a pooling answer comes whole, at its end) and the e2e percentiles; no TTFT (nothing is streamed).
The report's table per endpoint (docs/guides/endpoints.md)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput
from vllm_stress.analysis.measures import PERCENTILES, percentiles_by_level
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.classes import POOLING_APIS
from vllm_stress.core.numbers import count, milliseconds

KINDS = POOLING_APIS  # vLLM's pooling APIs, as their paths end (/v1/embeddings, /rerank ...)
RATES = {  # field suffix -> (the rows' column summed, None: the rows counted; its description)
    "requests_per_s": (None, "measured {kind} requests ended in the level's window per second"),
    "inputs_per_s": ("inputs", "the inputs (embeddings) or documents (rerank, score) of those requests per second"),
    "input_tokens_per_s": ("prompt_tokens", "their prompt tokens (the server's usage) per second"),
}
FIELDS = {f"{kind}_{suffix}": text.format(kind=kind) for kind in KINDS for suffix, (_, text) in RATES.items()} | {
    f"{kind}_e2e_p{p}_s": f"e2e p{p} of the measured {kind} requests (sent to the whole answer read)"
    for kind in KINDS
    for p in PERCENTILES
}


def row_kinds(rows: pd.DataFrame) -> pd.Series:
    """Each row's endpoint as its kind: the last part of its path (a pooling kind, or another API's)."""
    return rows["endpoint"].fillna("").astype(str).str.rsplit("/", n=1).str[-1]


def kind_of(rows: pd.DataFrame) -> str | None:
    """The pooling API all of ``rows`` went to (a traffic class's), None when they went to another (or to several)."""
    kinds = set(row_kinds(rows))
    return kinds.pop() if len(kinds) == 1 and kinds <= set(KINDS) else None


def level_fields(level: LevelInput) -> pd.DataFrame:
    window_s = level.base["window_s"]
    stats = pd.DataFrame(index=level.base.index)
    kinds = row_kinds(level.measured)
    for kind in KINDS:
        rows = level.measured[kinds == kind]
        by_level = rows.groupby("users")
        for suffix, (column, _) in RATES.items():
            total = by_level.size() if column is None else by_level[column].sum()
            stats[f"{kind}_{suffix}"] = total.reindex(stats.index) / window_s
        stats = stats.join(percentiles_by_level(rows, {f"{kind}_e2e": "e2e_s"}, PERCENTILES))
    return stats


def sent(config: Config, kind: str) -> list[Config]:
    """The config's levels with measured requests of ``kind``."""
    return [level for level in config["levels"] if level.get(f"{kind}_requests_per_s") is not None]


def used(config: Config) -> bool:
    """A level measured pooling requests."""
    return any(sent(config, kind) for kind in KINDS)


NOTE = (
    "Pooling requests are not streamed: no TTFT or TPOT, their latency is e2e (sent to the whole answer read). Rates "
    "are over the measured requests that ended in the level's window; inputs are an embeddings request's texts or a "
    "rerank or score request's documents."
)
HEADERS = ["users", "requests/s", "inputs/s", "input tokens/s", "e2e p50", "e2e p90", "e2e p99"]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    """A table per pooling endpoint the config's runs sent."""
    found: list[Block] = [Heading(f"Embeddings and rerank: {label}"), Paragraph(NOTE)]
    for kind in KINDS:
        if levels := sent(config, kind):
            found += [Heading(kind, 3), Table(HEADERS, [row(level, kind) for level in levels])]
    return found


def row(level: Config, kind: str) -> list[str]:
    rates = [count(level[f"{kind}_{suffix}"], 1) for suffix in RATES]
    return [str(level["users"]), *rates, *(milliseconds(level[f"{kind}_e2e_p{p}_s"]) for p in PERCENTILES)]
