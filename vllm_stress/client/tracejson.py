"""JSON trace files (``--session-trace``) read as their documents: one JSON value, pretty-printed or not, or one a
line (JSONL), each named by its file and line for a reader's errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any


@dataclass
class JsonText:
    """A trace file's text, its first JSON value decoded once for all the readers asking whether the file is theirs
    (a whole-file trace can be a large document)."""

    path: str
    text: str

    @cached_property
    def stripped(self) -> str:
        return self.text.lstrip()

    @cached_property
    def first(self) -> tuple[Any, int] | None:
        """The first JSON value and where it ends in ``stripped``; None when the text opens with none."""
        try:
            return json.JSONDecoder().raw_decode(self.stripped)
        except ValueError:
            return None


def json_documents(trace: JsonText, is_one: Callable[[Any], bool]) -> list[tuple[str, Any]] | None:
    """The documents of a file's text with where each is (its path alone for a whole-file one, else ``path:line``);
    None when its first JSON value fails ``is_one``: another format's file."""
    if trace.first is None or not is_one(trace.first[0]):
        return None
    first, end = trace.first
    if not trace.stripped[end:].strip():
        return [(trace.path, first)]
    return [(f"{trace.path}:{number}", json_line(trace.path, number, raw)) for number, raw in numbered(trace.text)]


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
