"""Weka agent traces (``--session-trace``), as kv-cache-tester records them and SemiAnalysis' AgentX replays them
through NVIDIA AIPerf's agentic mode: each trace one recorded session, its subagents' sessions with it.

A trace is a JSON object: ``id``, ``block_size`` (tokens of one hash id), ``hash_id_scope`` ("local": its hash ids
are its own, so equal ids of two traces are two blocks; "global": shared by the traces) and its ``requests`` in
order. A request is a call (``type`` "n", or "s" streamed: ``t`` seconds from the conversation's start, ``in`` and
``out`` tokens, ``hash_ids``, ``think_time`` seconds before it or null) or a subagent marker (``type`` "subagent":
``agent_id``, ``status``, its own ``requests``, markers included). Consecutive markers are a fan-out: their subagents
run together, and the call after them waits for all but the "async_launched" ones (the join). A call's gap is its
think time, else its ``t`` less the previous call's (to its fan-out's first marker: the subagents' own time is
replayed, not waited); a session's first call has none. A file holds one trace, a JSONL file one a line, a folder
one per ``.json`` file (in name order).
"""

from __future__ import annotations

import os
from typing import Any

from .sessionmodel import RecordedSession, RecordedTurn
from .trace import read_text
from .tracejson import JsonText, json_documents, reason

ASYNC = "async_launched"  # a subagent's status when its parent went on without waiting for it
SCOPES = {"local", "global"}
TRACE_KEYS = {"id", "models", "block_size", "hash_id_scope", "tool_tokens", "system_tokens", "requests", "totals"}
CALL_KEYS = {"t", "type", "model", "in", "out", "hash_ids", "input_types", "output_types", "stop"}
CALL_KEYS |= {"api_time", "think_time", "ttft"}
SUBAGENT_KEYS = {"t", "type", "agent_id", "subagent_type", "duration_ms", "total_tokens", "tool_use_count", "status"}
SUBAGENT_KEYS |= {"requests", "models", "tool_tokens", "system_tokens"}
CALL_TYPES = {"n", "s"}  # a normal call and a streamed one
NOT_A_TRACE = "not a Weka trace (an object with requests and block_size)"


def weka_sessions(trace: JsonText) -> list[RecordedSession] | None:
    """The traces of a file's text (one JSON trace, or one a line) as sessions; None when its first JSON value is
    not a trace (an object with ``requests`` and ``block_size``): another format's file."""
    traces = json_documents(trace, is_trace)
    return None if traces is None else [read_trace(where, trace) for where, trace in traces]


def is_trace(item: Any) -> bool:
    return isinstance(item, dict) and "requests" in item and "block_size" in item


def read_weka_folder(path: str) -> list[RecordedSession]:
    """The traces of a folder's ``.json`` files, in name order."""
    names = sorted(name for name in os.listdir(path) if name.endswith(".json"))
    if not names:
        raise ValueError(f"{path}: a folder without .json traces")
    sessions = []
    for name in names:
        file = os.path.join(path, name)
        traces = weka_sessions(JsonText(file, read_text(file)))
        if traces is None:
            raise ValueError(f"{file}: {NOT_A_TRACE}")
        sessions += traces
    return sessions


def read_trace(where: str, item: Any) -> RecordedSession:
    """One trace as a session; ValueError ``where: trace ID: requests[i]...: ...`` when it is not one."""
    if not is_trace(item):
        raise ValueError(f"{where}: {NOT_A_TRACE}")
    try:
        checked(item, TRACE_KEYS)
        trace_id, blocks = str(item["id"]), at_least(item, "block_size", 1)
        scope = item.get("hash_id_scope", "local")
        if scope not in SCOPES:
            raise ValueError(f"hash_id_scope must be local or global, not {scope!r}")
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: {reason(e)}") from None
    where = f"{where}: trace {trace_id!r}"
    salt = f"{trace_id}-" if scope == "local" else ""
    turns, after = read_requests(where, "requests", item["requests"], blocks, salt)
    if not turns:
        raise ValueError(f"{where}: no call of its own (a normal or streamed request)")
    return RecordedSession(trace_id, turns, blocks, salt, after)


def read_requests(
    where: str, at: str, items: Any, blocks: int, salt: str
) -> tuple[tuple[RecordedTurn, ...], tuple[RecordedSession, ...]]:
    """A session's requests ``items`` (at ``at`` in its trace; its hash ids' ``blocks`` tokens and ``salt``) as its
    turns, each with the fan-out of the markers before it, and the subagents launched after its last call."""
    if not isinstance(items, list):
        raise ValueError(f"{where}: {at}: a list of requests expected")
    turns: list[RecordedTurn] = []
    fanout: list[RecordedSession] = []
    launched: float | None = None  # the fan-out's first marker's t
    previous: float | None = None  # the previous call's t
    seen: set[int] = set()
    for index, item in enumerate(items):
        here = f"{at}[{index}]"
        if isinstance(item, dict) and item.get("type") == "subagent":
            t, agent = read_subagent(where, here, item, blocks, salt)
            launched = t if launched is None else launched
            fanout += [agent] if agent.turns or agent.after else []  # one without a request sends nothing
            continue
        t, call = read_call(where, here, item)
        starts = t if launched is None else min(t, launched)  # the call, or its fan-out's launch
        if previous is not None and starts < previous:
            raise ValueError(f"{where}: {here}: its t is before the previous call's")
        gap = call["think_time"]
        if gap is None:
            gap = 0.0 if previous is None else starts - previous
        hash_ids = call["hash_ids"]
        turns.append(
            RecordedTurn(call["in"], call["out"], hash_ids, gap, sum(h in seen for h in hash_ids), tuple(fanout))
        )
        seen.update(hash_ids)
        fanout, launched, previous = [], None, t
    return tuple(turns), tuple(fanout)


def read_call(where: str, here: str, item: Any) -> tuple[float, dict[str, Any]]:
    """A call's t and what its turn takes of it: in, out, hash_ids, think_time."""
    try:
        checked(item, CALL_KEYS)
        if item["type"] not in CALL_TYPES:
            raise ValueError(f"type must be n, s or subagent, not {item['type']!r}")
        think = item.get("think_time")
        call = {
            "in": at_least(item, "in", 1),
            "out": at_least(item, "out", 1),
            "hash_ids": tuple(int(h) for h in item.get("hash_ids") or ()),
            "think_time": None if think is None else seconds(item, "think_time"),
        }
        return seconds(item, "t"), call
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: {here}: {reason(e)}") from None


def read_subagent(where: str, here: str, item: dict, blocks: int, salt: str) -> tuple[float, RecordedSession]:
    """A subagent marker's t and its session (its requests at ``here.requests``)."""
    try:
        checked(item, SUBAGENT_KEYS)
        t, agent_id, status, requests = (
            seconds(item, "t"),
            str(item["agent_id"]),
            item.get("status", ""),
            item["requests"],
        )
        if not isinstance(status, str):
            raise ValueError(f"status must be text, not {status!r}")
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: {here}: {reason(e)}") from None
    turns, after = read_requests(where, f"{here}.requests", requests, blocks, salt)
    return t, RecordedSession(agent_id, turns, blocks, salt, after, awaited=status != ASYNC)


def checked(item: Any, keys: set[str]) -> None:
    """ValueError for an item that is not an object, or has a key its kind does not list."""
    if not isinstance(item, dict):
        raise TypeError(f"an object expected, not {type(item).__name__}")
    if unknown := sorted(set(item) - keys):
        raise ValueError(f"unknown key {unknown[0]!r}")


def at_least(item: dict, key: str, low: int) -> int:
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{key} must be a whole number of at least {low}, not {value!r}")
    return value


def seconds(item: dict, key: str) -> float:
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ValueError(f"{key} must be seconds of at least 0, not {value!r}")
    return float(value)
