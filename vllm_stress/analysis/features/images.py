"""Images and videos (vision models) in the analysis: the prompt tokens and bytes a level's images and videos added
per request, the videos' share of the prompt the server prefilled, and their columns of the per-level table."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from vllm_stress.analysis.features import Column, Config, LevelInput
from vllm_stress.core.numbers import count, percent

FIELDS = {
    "image_tokens_mean": "with --images: the prompt tokens a measured request's images added (image_tokens, measured "
    "on the server at test start), averaged over the level's measured requests that sent images",
    "image_bytes_mean": "with --images: the bytes of a measured request's image data URLs, the same average",
    "video_tokens_mean": "with --videos: the prompt tokens a measured request's videos added (video_tokens, measured "
    "on the server at test start), averaged over the level's measured requests that sent videos",
    "video_bytes_mean": "with --videos: the bytes of a measured request's video data URLs, the same average",
    "video_prompt_share": "with --videos: of those requests' prompt tokens (usage), the share their videos added: the "
    "part of each prefill (and of its encoder work) the videos cost",
}
MEDIA = {"image": "images", "video": "videos"}  # a field's prefix -> the column counting its parts


def level_fields(level: LevelInput) -> pd.DataFrame:
    fields = {}
    for prefix, count_column in MEDIA.items():
        sent = level.measured[level.measured[count_column] > 0].groupby("users")
        for name in ("tokens", "bytes"):
            fields[f"{prefix}_{name}_mean"] = sent[f"{prefix}_{name}"].mean()
    videos = level.measured[level.measured["videos"] > 0].groupby("users")
    fields["video_prompt_share"] = videos["video_tokens"].sum() / videos["prompt_tokens"].sum()
    return pd.DataFrame(fields, index=level.base.index)


def used(config: Config) -> bool:
    """A level whose measured requests sent images or videos."""
    return any(level.get(f"{prefix}_tokens_mean") is not None for level in config["levels"] for prefix in MEDIA)


def columns(config: Config) -> list[Column]:
    def kilobytes(field: str) -> Callable[[Config], str]:
        return lambda level: count(level.get(field) and level[field] / 1e3)

    def tokens(field: str) -> Callable[[Config], str]:
        return lambda level: count(level.get(field))

    levels = config["levels"]
    shown = [prefix for prefix in MEDIA if any(level.get(f"{prefix}_tokens_mean") is not None for level in levels)]
    columns = []
    for prefix in shown:
        title = prefix.capitalize()
        columns += [
            Column(f"{title} tokens / req", tokens(f"{prefix}_tokens_mean")),
            Column(f"{title} KB / req", kilobytes(f"{prefix}_bytes_mean")),
        ]
    if "video" in shown:
        columns.append(Column("Video share of prompt", lambda level: percent(level.get("video_prompt_share"))))
    return columns
