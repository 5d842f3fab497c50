"""TraceLab coding-agent traces (``--session-trace``): the University of Washington SyFI Lab's sanitized Claude Code
and Codex sessions (UW-SyFI/TraceLab), as inference-perf's tracelab_trace_replay reads them; each session one
recorded session of rounds.

A file has one round a line (JSONL, or a JSON list of them): ``session_id``, ``round_index`` (its order in the
session), ``input_tokens_total`` (= ``prefix_tokens``, those repeated from the session's history, + the newly
appended ones), ``output_tokens`` and ``tools`` (the tool calls its answer made: ``tool_wall_latency_ms``, else
``tool_internal_latency_ms``); other fields (provider, model, round_id, ...) are left. A round's gap is the tool
time of the round before it (a session's first round has none). Traces keep no text: a round's prompt repeats the
first ``prefix_tokens`` of the session's history (at most the previous round's prompt and answer, as the dataset
says) and adds new tokens (tracehistory.py).
"""

from __future__ import annotations

import itertools
from typing import Any

from .sessionmodel import RecordedSession, RecordedTurn
from .tracehistory import HISTORY_BLOCK_TOKENS, GrowingHistory
from .tracejson import JsonText, json_documents, reason

ROUND_KEYS = ("round_index", "input_tokens_total")  # a TraceLab round has them


def is_round(item: Any) -> bool:
    return isinstance(item, dict) and all(key in item for key in ROUND_KEYS)


def opens_rounds(item: Any) -> bool:
    """A round, or a list opening with one."""
    return is_round(item) or (isinstance(item, list) and bool(item) and is_round(item[0]))


def tracelab_sessions(trace: JsonText) -> list[RecordedSession] | None:
    """The sessions of a file's text (a round a line, or a JSON list of rounds), in the order they first appear;
    None when its first JSON value is neither a round nor a list opening with one."""
    documents = json_documents(trace, opens_rounds)
    if documents is None:
        return None
    if len(documents) == 1 and isinstance(documents[0][1], list):
        documents = [(f"{trace.path}: [{index}]", item) for index, item in enumerate(documents[0][1])]
    rounds: dict[str, list[tuple[int, dict]]] = {}
    for where, item in documents:
        checked = read_round(where, item)
        rounds.setdefault(checked["session_id"], []).append((checked["round_index"], checked))
    return [session_of(session_id, items) for session_id, items in rounds.items()]


def read_round(where: str, item: Any) -> dict[str, Any]:
    """One round's fields, checked: ValueError ``where: not a TraceLab round (...)``."""
    try:
        if not isinstance(item, dict):
            raise TypeError(f"an object expected, not {type(item).__name__}")
        tools = item.get("tools") or []
        if not isinstance(tools, list) or not all(isinstance(tool, dict) for tool in tools):
            raise ValueError("tools must be a list of objects")
        tokens = whole(item, "input_tokens_total", 1)
        prefix = 0 if item.get("prefix_tokens") is None else whole(item, "prefix_tokens", 0)
        checked = {
            "session_id": str(item["session_id"]).replace("/", "-"),
            "round_index": whole(item, "round_index", 0),
            "input": tokens,
            "prefix": prefix,
            "output": whole(item, "output_tokens", 1),
            "tool_s": sum(tool_ms(tool) for tool in tools) / 1000,
        }
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: not a TraceLab round ({reason(e)})") from None
    if prefix > tokens:
        raise ValueError(f"{where}: prefix_tokens is more than input_tokens_total")
    return checked


def whole(item: dict, key: str, low: int) -> int:
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{key} must be a whole number of at least {low}, not {value!r}")
    return value


def tool_ms(tool: dict) -> float:
    """A tool call's time: its wall latency, else its internal one (ms; none: 0)."""
    value = tool.get("tool_wall_latency_ms")
    value = tool.get("tool_internal_latency_ms") if value is None else value
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ValueError(f"a tool latency must be ms of at least 0, not {value!r}")
    return float(value)


def session_of(session_id: str, items: list[tuple[int, dict]]) -> RecordedSession:
    """A session's rounds, in round order, as its turns."""
    history = GrowingHistory(itertools.count())
    turns: list[RecordedTurn] = []
    gap = 0.0
    for _, item in sorted(items, key=lambda pair: pair[0]):
        hash_ids, reused = history.prompt(item["prefix"], item["input"])
        history.answer(item["output"])
        turns.append(RecordedTurn(item["input"], item["output"], hash_ids, gap, reused))
        gap = item["tool_s"]
    return RecordedSession(session_id, tuple(turns), HISTORY_BLOCK_TOKENS, f"{session_id}-")
