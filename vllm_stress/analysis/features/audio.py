"""Audio (speech-to-text) in the analysis: per level, the measured audio requests (rows with audio_s) that ended in
the level's window per second, the audio seconds they carried per second of wall time (the real-time factor: how
many seconds of audio the server transcribes in one), their e2e and, when streamed, TTFT percentiles; the report's
table (docs/guides/endpoints.md, "Audio: transcription and translation")."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput
from vllm_stress.analysis.measures import percentiles_by_level
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.numbers import count, milliseconds

PERCENTS = (50, 99)
TIMES = {"audio_e2e": "e2e_s", "audio_ttft": "ttft_s"}  # field prefix -> the rows' column
FIELDS = {
    "audio_requests_per_s": "measured audio requests (transcription, translation) ended in the level's window per "
    "second",
    "audio_s_per_s": "the seconds of audio those requests sent, per second of the window: audio processed per "
    "second of wall time (the real-time factor of the whole server)",
} | {
    f"{name}_p{p}_s": f"{what} p{p} of the measured audio requests"
    for name, what in (("audio_e2e", "e2e"), ("audio_ttft", "TTFT (streamed requests only)"))
    for p in PERCENTS
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    window_s = level.base["window_s"]
    stats = pd.DataFrame(index=level.base.index)
    rows = level.measured[level.measured["audio_s"].notna()]
    by_level = rows.groupby("users")
    stats["audio_requests_per_s"] = by_level.size().reindex(stats.index) / window_s
    stats["audio_s_per_s"] = by_level["audio_s"].sum().reindex(stats.index) / window_s
    return stats.join(percentiles_by_level(rows, TIMES, PERCENTS))


def sent(config: Config) -> list[Config]:
    """The config's levels with measured audio requests."""
    return [level for level in config["levels"] if level.get("audio_requests_per_s") is not None]


def used(config: Config) -> bool:
    """A level measured audio requests."""
    return bool(sent(config))


NOTE = (
    "Each audio request sent --audio-seconds of synthetic audio; audio s/s is the audio of the measured requests "
    "that ended in the level's window per second of it (above 1: faster than real time). A transcript is as long "
    "as the model makes it: its tokens are not checked against a target. TTFT only for streamed requests."
)
HEADERS = ["users", "requests/s", "audio s/s", "e2e p50", "e2e p99", "TTFT p50", "TTFT p99"]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    """The per-level table of the audio requests."""
    return [Heading(f"Audio: transcription and translation: {label}"), Paragraph(NOTE), Table(HEADERS, rows(config))]


def rows(config: Config) -> list[list[str]]:
    return [
        [
            str(level["users"]),
            count(level["audio_requests_per_s"], 2),
            count(level["audio_s_per_s"], 1),
            *(milliseconds(level[f"{name}_p{p}_s"]) for name in TIMES for p in PERCENTS),
        ]
        for level in sent(config)
    ]
