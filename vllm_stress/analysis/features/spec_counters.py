"""Speculative decoding in a run and against a baseline: per level the server's acceptance rate and mean accepted
length from its spec-decode counters (server_metrics.csv, ``SpecDecodingProm`` in vLLM's
``vllm/v1/spec_decode/metrics.py`` defines both), the table of them beside tokens per chunk, ITL per chunk and TPOT,
and the crossover: the level of a comparison where speculative decoding stops paying
(docs/guides/speculative-decoding.md)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd

from vllm_stress.analysis.measures import Level, counter_gains
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.numbers import count, percent, seconds


class Change(Protocol):
    """One metric at one level of a comparison (``vllm_stress.analysis.compare.compare.Difference``)."""

    users: int
    metric: str
    baseline: float
    candidate: float
    change: float


ACCEPTED_LENGTH = "server_spec_accepted_length"
PAYING = {"output_tok_s": 1, "tpot_p50": -1}  # the compared metrics that say whether it pays: +1 higher is better


def spec_decode_stats(server: pd.DataFrame | None, windows: pd.DataFrame) -> pd.DataFrame:
    """Per level (index users): ``server_spec_acceptance_rate`` = accepted / draft tokens and ``ACCEPTED_LENGTH`` =
    1 + accepted tokens / drafts, from the counters gained in its window (NaN without them)."""
    drafts, draft_tokens, accepted = (
        counter_gains(server, windows, column)
        for column in ("spec_drafts", "spec_draft_tokens", "spec_accepted_tokens")
    )
    with np.errstate(divide="ignore", invalid="ignore"):
        rate = np.where(draft_tokens > 0, accepted / draft_tokens, np.nan)
        length = np.where(drafts > 0, 1 + accepted / drafts, np.nan)
    return pd.DataFrame(
        {"server_spec_acceptance_rate": rate, ACCEPTED_LENGTH: length}, index=windows["users"].to_numpy()
    )


def spec_decode_blocks(levels: list[Level]) -> list[Block]:
    """A config's speculative-decoding table, when its server counted drafts; else []."""
    if all(level.get(ACCEPTED_LENGTH) is None for level in levels):
        return []
    rows = [
        [
            str(level["users"]),
            count(level.get("tokens_per_chunk"), 2),
            seconds(level.get("itl_p50_s")),
            seconds(level.get("tpot_p50_s")),
            percent(level.get("server_spec_acceptance_rate")),
            count(level.get(ACCEPTED_LENGTH), 2),
        ]
        for level in levels
    ]
    headers = ["Users", "Tokens / chunk", "ITL p50 (per chunk)", "TPOT p50 (per token)", "Acceptance", "Accepted len"]
    return [Heading("Speculative decoding"), Paragraph(SPEC_NOTE), Table(headers, rows)]


SPEC_NOTE = (
    "From the server's counters in each window: acceptance = accepted / draft tokens, accepted length = 1 + accepted "
    "tokens / drafts (the bonus token included, as vLLM logs it). A chunk carries a step's tokens, so ITL is per "
    "chunk (as vllm bench serve's) and TPOT per token."
)


@dataclass(frozen=True)
class Crossover:
    """The lowest compared level where the candidate (speculative decoding) is no better than the baseline on a
    ``PAYING`` metric, and why; ``users`` None when it pays at every compared level."""

    users: int | None
    reason: str


def crossover(differences: Sequence[Change], accepted_length: pd.Series | None) -> Crossover | None:
    """Where speculative decoding stops paying in a comparison's ``differences``, when the candidate side ran it
    (``accepted_length``: its levels' ``ACCEPTED_LENGTH``, not all NaN nor None); None otherwise. "No better" is by the means,
    noise or not."""
    if accepted_length is None or accepted_length.isna().all():
        return None
    by_level = {(d.users, d.metric): d for d in differences}
    for users in sorted({d.users for d in differences}):
        for metric, better in PAYING.items():
            difference = by_level.get((users, metric))
            if difference and difference.change * better <= 0:
                reason = f"{metric} {difference.baseline:.4g} without, {difference.candidate:.4g} with"
                return Crossover(users, reason)
    return Crossover(None, f"better on {' and '.join(PAYING)} at every compared level")


def crossover_text(differences: Sequence[Change], accepted_length: pd.Series | None) -> str | None:
    """The comparison's speculative-decoding verdict in one sentence (None when the candidate did not run it)."""
    found = crossover(differences, accepted_length)
    if found is None:
        return None
    if found.users is None:
        return f"Speculative decoding (the candidate) pays at every compared level: {found.reason}."
    return f"Speculative decoding (the candidate) stops paying at {found.users} users: {found.reason}."


def crossover_blocks(differences: Sequence[Change], accepted_length: pd.Series | None) -> list[Block]:
    """The comparison report's speculative-decoding verdict (nothing when the candidate did not run it)."""
    text = crossover_text(differences, accepted_length)
    return [Heading("Speculative decoding: crossover"), Paragraph(text)] if text else []
