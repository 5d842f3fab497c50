"""Speculative decoding in the analysis: each level's tokens per chunk and the server's acceptance rate and accepted
length, and the report's table of them (vllm_stress.analysis.features.spec_counters)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput
from vllm_stress.analysis.features.spec_counters import ACCEPTED_LENGTH, spec_decode_blocks, spec_decode_stats
from vllm_stress.analysis.report.render import Block
from vllm_stress.core.metrics import tokens_per_chunk

FIELDS = {
    "tokens_per_chunk": "output tokens per output chunk of the measured streams (above 1 with speculative decoding)",
    "server_spec_acceptance_rate": "speculative decoding: the server's accepted / draft tokens in the window",
    "server_spec_accepted_length": "speculative decoding: 1 + the server's accepted tokens / drafts in the window",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    measured, index = level.measured, level.base.index
    streamed = measured[(measured["chunks"] > 0) & measured["completion_tokens"].notna()].groupby("users")
    tokens, chunks = streamed["completion_tokens"].sum(), streamed["chunks"].sum()
    per_chunk = [tokens_per_chunk(tokens.get(users, 0), chunks.get(users, 0)) for users in index]
    fields = pd.DataFrame({"tokens_per_chunk": per_chunk}, index=index)
    return fields.join(spec_decode_stats(level.run.tables.get("server"), level.windows))


def used(config: Config) -> bool:
    """The server counted drafts at a level."""
    return any(level.get(ACCEPTED_LENGTH) is not None for level in config["levels"])


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return spec_decode_blocks(config["levels"])
