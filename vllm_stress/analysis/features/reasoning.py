"""Reasoning models in the analysis: each level's time to first answer token, reasoning share, answer tok/s and the
requests cut before their answer, and their columns of the per-level table (docs/concepts/metrics.md)."""

from __future__ import annotations

import pandas as pd

from vllm_stress.analysis.features import Column, Config, LevelInput
from vllm_stress.analysis.measures import percentiles_by_level
from vllm_stress.core.numbers import count, percent, seconds

FIELDS = {
    "ttfa_p50_s": "time to first answer token (p50/p99), same requests that answered: after a reasoning model's "
    "thinking; equals TTFT without reasoning",
    "reasoning_share": "reasoning tokens / output tokens of the measured requests; empty when none of the level's "
    "rows says it reasoned",
    "answer_tokens_per_s": "the answer's share of output_tokens_per_s: output_tokens_per_s x (1 - reasoning_share) "
    "(the share of the measured requests applied to every token streamed in the window); empty without reasoning",
    "cut_before_answer": "successful requests ended in the window that reasoned and never answered (no ttfa_s): "
    "their max_tokens ran out while thinking",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    """ttfa_p50_s, ttfa_p99_s and reasoning_share (NaN where no row says reasoning tokens), the answer tok/s and the
    successful requests that reasoned and never answered."""
    measured, ended, index = level.measured, level.ended, level.base.index
    told = measured[measured["reasoning_tokens"] > 0]
    share = told.groupby("users")["reasoning_tokens"].sum() / measured.groupby("users")["completion_tokens"].sum()
    fields = percentiles_by_level(measured, {"ttfa": "ttfa_s"}, (50, 99)).reindex(index)
    fields["reasoning_share"] = share.reindex(index)
    fields["answer_tokens_per_s"] = level.base["output_tokens_per_s"] * (1 - fields["reasoning_share"])
    cut = ended["ok"] & (ended["reasoning_tokens"] > 0) & ended["ttfa_s"].isna()
    fields["cut_before_answer"] = cut.groupby(ended["users"]).sum().reindex(index, fill_value=0)
    return fields


def used(config: Config) -> bool:
    """A level whose rows said they reasoned."""
    return any(level.get("reasoning_share") is not None for level in config["levels"])


def columns(config: Config) -> list[Column]:
    return [
        Column("TTFA p50", lambda level: seconds(level.get("ttfa_p50_s"))),
        Column("TTFA p99", lambda level: seconds(level.get("ttfa_p99_s"))),
        Column("Reasoning share", lambda level: percent(level.get("reasoning_share"))),
        Column("Answer tok/s", lambda level: count(level.get("answer_tokens_per_s"))),
        Column("Cut before answer", lambda level: count(level.get("cut_before_answer"))),
    ]
