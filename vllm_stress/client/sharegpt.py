"""ShareGPT-format conversations, as ``vllm bench serve --dataset-name sharegpt`` reads them."""

from __future__ import annotations

import json
from typing import Any

from vllm_stress.client.datafile import is_parquet, parquet_columns, records

HUMAN = ("human", "user")  # the speakers whose turns are sent ("user" in some re-exports of the dump)


def is_sharegpt(path: str) -> bool:
    """Whether ``path`` looks like ShareGPT: a JSON list, a first JSONL line with ``conversations``, or a Parquet file
    with that column (the Hub's ShareGPT re-exports)."""
    if is_parquet(path):
        return "conversations" in parquet_columns(path)
    head = file_head(path)
    return head.startswith("[") or (head.startswith("{") and '"conversations"' in head.split("\n", 1)[0])


def file_head(path: str) -> str:
    """The start of a text file, leading blanks dropped: enough to tell a JSON list from JSON lines."""
    with open(path, encoding="utf-8") as f:
        return f.read(4096).lstrip()


def read_conversations(path: str, *more: str) -> list[list[str]]:
    """The human turns of every conversation in ``path`` (then in the ``more`` files: a Hub dataset's), in order;
    ValueError with the place for a bad item."""
    conversations = [
        turns
        for file in (path, *more)
        for place, item in conversation_items(file)
        if (turns := human_turns(place, item))
    ]
    if not conversations:
        raise ValueError(f"{path}: no conversation with a human turn")
    return conversations


def conversation_items(path: str) -> list[tuple[str, Any]]:
    """The items of a JSON list (each with its position), or a JSONL or Parquet file's records (each with its place)."""
    if is_parquet(path) or not file_head(path).startswith("["):
        return list(records(path))
    with open(path, encoding="utf-8") as f:
        try:
            return [(f"{path}: item {number}", item) for number, item in enumerate(json.load(f), 1)]
        except ValueError as e:
            raise ValueError(f"{path}: not a JSON list ({e})") from None


def human_turns(place: str, item: Any) -> list[str]:
    """The human turns of one item (``place``: where it is in its file)."""
    try:
        return [turn["value"] for turn in item["conversations"] if turn["from"] in HUMAN and turn["value"].strip()]
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{place}: not a ShareGPT conversation ({type(e).__name__}: {e})") from None
