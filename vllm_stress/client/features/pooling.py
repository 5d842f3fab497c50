"""Embeddings and rerank (vLLM's pooling APIs): how many inputs an embeddings request carries, how many documents a
rerank or score request scores, and how embeddings come back."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vllm_stress.client.pooling import ENCODING_FORMATS

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def at_least_one(text: str) -> int:
    """A count of inputs or documents: an integer from 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--embedding-inputs",
        type=at_least_one,
        default=1,
        help="Embeddings users (locustfiles/embeddings.py): inputs per request, each a prompt of --input-tokens sized "
        "with the server's /tokenize; usage.prompt_tokens is checked against their sum",
    )
    group.add_argument(
        "--embedding-format",
        choices=ENCODING_FORMATS,
        default="float",
        help="Embeddings users: the encoding_format asked (a list of floats, or base64 of float32s)",
    )
    group.add_argument(
        "--rerank-documents",
        type=at_least_one,
        default=8,
        help="Rerank and score users (locustfiles/rerank.py, score.py): documents scored against each query, the "
        "query and each document a prompt of --input-tokens",
    )
