"""ShareGPT-format conversations, as ``vllm bench serve --dataset-name sharegpt`` reads them."""

from __future__ import annotations

import json
from typing import Any

HUMAN = ("human", "user")  # the speakers whose turns are sent ("user" in some re-exports of the dump)


def is_sharegpt(path: str) -> bool:
    """Whether ``path`` looks like ShareGPT: a JSON list, or a first JSONL line with ``conversations``."""
    with open(path, encoding="utf-8") as f:
        head = f.read(4096).lstrip()
    return head.startswith("[") or (head.startswith("{") and '"conversations"' in head.split("\n", 1)[0])


def read_conversations(path: str) -> list[list[str]]:
    """The human turns of every conversation in ``path``, in order; ValueError with the place for a bad item."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    if text.lstrip().startswith("["):
        try:
            items = list(enumerate(json.loads(text), 1))
        except ValueError as e:
            raise ValueError(f"{path}: not a JSON list ({e})") from None
    else:
        items = []
        for number, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    items.append((number, json.loads(line)))
                except ValueError as e:
                    raise ValueError(f"{path}:{number}: not a JSON line ({e})") from None
    conversations = [turns for number, item in items if (turns := human_turns(path, number, item))]
    if not conversations:
        raise ValueError(f"{path}: no conversation with a human turn")
    return conversations


def human_turns(path: str, number: int, item: Any) -> list[str]:
    """The human turns of one item (``number``: its line, or its position in the JSON list)."""
    try:
        return [turn["value"] for turn in item["conversations"] if turn["from"] in HUMAN and turn["value"].strip()]
    except (KeyError, TypeError, AttributeError) as e:
        raise ValueError(f"{path}: item {number}: not a ShareGPT conversation ({type(e).__name__}: {e})") from None
