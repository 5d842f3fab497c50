"""JSON trace files (``--session-trace``) read as their documents: one JSON value, pretty-printed or not, or one a
line (JSONL), each named by its file and line for a reader's errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any


def json_documents(path: str, text: str, is_one: Callable[[Any], bool]) -> list[tuple[str, Any]] | None:
    """The documents of a file's ``text`` with where each is (``path`` alone for a whole-file one, else
    ``path:line``); None when its first JSON value fails ``is_one``: another format's file."""
    try:
        first, end = json.JSONDecoder().raw_decode(text.lstrip())
    except ValueError:
        return None
    if not is_one(first):
        return None
    if not text.lstrip()[end:].strip():
        return [(path, first)]
    return [(f"{path}:{number}", json_line(path, number, raw)) for number, raw in numbered(text)]


def numbered(text: str) -> list[tuple[int, str]]:
    return [(number, raw) for number, raw in enumerate(text.splitlines(), 1) if raw.strip()]


def json_line(path: str, number: int, raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError as e:
        raise ValueError(f"{path}:{number}: not a JSON trace ({e})") from None


def reason(e: Exception) -> str:
    """An error's one-line reason: a missing key named as such."""
    return f"no {e.args[0]!r}" if isinstance(e, KeyError) else str(e)
