"""Images (vision models) in the analysis: the prompt tokens and bytes a level's images added per request, and their
columns of the per-level table."""

from __future__ import annotations

import pandas as pd

from vllm_stress.analysis.features import Column, Config, LevelInput
from vllm_stress.core.numbers import count

FIELDS = {
    "image_tokens_mean": "with --images: the prompt tokens a measured request's images added (image_tokens, measured "
    "on the server at test start), averaged over the level's measured requests that sent images",
    "image_bytes_mean": "with --images: the bytes of a measured request's image data URLs, the same average",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    with_images = level.measured[level.measured["images"] > 0].groupby("users")
    means = {field: with_images[field.removesuffix("_mean")].mean() for field in FIELDS}
    return pd.DataFrame(means, index=level.base.index)


def used(config: Config) -> bool:
    """A level whose measured requests sent images."""
    return any(level.get("image_tokens_mean") is not None for level in config["levels"])


def columns(config: Config) -> list[Column]:
    def kilobytes(level: Config) -> str:
        return count(level.get("image_bytes_mean") and level["image_bytes_mean"] / 1e3)

    return [
        Column("Image tokens / req", lambda level: count(level.get("image_tokens_mean"))),
        Column("Image KB / req", kilobytes),
    ]
