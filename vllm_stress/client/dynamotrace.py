"""NVIDIA Dynamo request traces (``--session-trace``), as Dynamo's frontend writes them with request tracing on and
AIPerf's agentic mode replays them: each agent session one recorded session, its subagents' sessions with it.

A trace has one record a line (``schema`` "dynamo.request.trace.v1"), bare (the stderr sink) or in the file sinks'
envelope (``{"timestamp", "event": RECORD}``); a line without a schema (an uploader's marker) is read past, as are
tool events and records without an ``agent_context``. A ``request_end`` record is a turn of its
``agent_context.session_id``: ``request.output_tokens`` answer tokens and ``replay.input_length`` (else
``request.input_tokens``) prompt tokens, made of the blocks of ``replay.input_sequence_hashes``, each
``replay.trace_block_size`` tokens (one size a trace). A sequence hash stands for the whole prefix up to its block,
so sessions sharing a prompt share its blocks. A session's turns are its requests in ``request.request_received_ms``
order (else the record's ``event_time_unix_ms``), each one's gap the time from the previous one's end (received +
``total_time_ms``). A session whose ``parent_trajectory_id`` (else ``parent_session_id``) is another session of the
trace is its subagent: launched before the parent's first request received after the subagent's first (the gap then
runs to the launch), which waits for it when it had ended by then (the join) and not otherwise; one launched after
the parent's last request is waited for at the parent's end. A trace without sequence hashes grows a history per
session (tracehistory.py). A trace is a ``.jsonl`` or ``.jsonl.gz`` file, a folder of them, or the ``jsonl_gz``
sink's prefix, its segments (``PREFIX.000000.jsonl.gz``, ...) read in segment order.
"""

from __future__ import annotations

import gzip
import itertools
import json
import os
import re
from dataclasses import dataclass
from typing import Any

from .sessionmodel import RecordedSession, RecordedTurn
from .trace import read_text
from .tracehistory import HISTORY_BLOCK_TOKENS, GrowingHistory
from .tracejson import JsonText, json_line, numbered, reason
from .tracelabtrace import whole

SCHEMA = "dynamo.request.trace.v1"
REQUEST_END = "request_end"
SUFFIXES = (".jsonl.gz", ".jsonl")
SEGMENT = re.compile(r"(.*)\.(\d+)\.jsonl\.gz")  # the jsonl_gz sink's PREFIX.NNNNNN.jsonl.gz
U64 = 2**64


@dataclass(frozen=True)
class Request:
    """One request_end record of a session, checked."""

    where: str  # file and line, for errors
    session_id: str
    parent_id: str  # its agent_context's parent session ("": none)
    received_ms: float
    end_ms: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    block_tokens: int | None  # its replay's trace_block_size (None: no sequence hashes)


def dynamo_sessions(trace: JsonText) -> list[RecordedSession] | None:
    """The sessions of a file's text, in the order they first appear; None when its first JSON value is not a Dynamo
    record (enveloped or not): another format's file."""
    if trace.first is None or not is_record(opened(trace.first[0])):
        return None
    return trace_sessions(trace.path, requests_of(trace.path, trace.text))


def read_dynamo_files(path: str) -> list[RecordedSession] | None:
    """The sessions of a Dynamo trace folder or segment prefix ``path`` (``dynamo_files``), read as one trace; None
    when ``path`` is neither."""
    files = dynamo_files(path)
    if files is None:
        return None
    return trace_sessions(path, [request for file in files for request in requests_of(file, read_text(file))])


def dynamo_files(path: str) -> list[str] | None:
    """The files of a Dynamo trace at ``path``: a folder's ``.jsonl`` and ``.jsonl.gz`` files (a prefix's segments in
    segment order) when one opens with a Dynamo record, or, for a path that is no file, the segments of that prefix
    (a ``.jsonl.gz`` or ``.jsonl`` ending left off); None when there are none (another format's file or folder)."""
    if os.path.isdir(path):
        names = sorted((name for name in os.listdir(path) if name.endswith(SUFFIXES)), key=segment_order)
        files = [os.path.join(path, name) for name in names]
        return files if any(opens_trace(first_line(file)) for file in files) else None
    if os.path.exists(path):
        return None
    stem = next((path.removesuffix(suffix) for suffix in SUFFIXES if path.endswith(suffix)), path)
    folder, prefix = os.path.split(stem)
    if not os.path.isdir(folder or "."):
        return None
    names = [
        name for name in os.listdir(folder or ".") if (segment := SEGMENT.fullmatch(name)) and segment[1] == prefix
    ]
    return [os.path.join(folder, name) for name in sorted(names, key=segment_order)] or None


def segment_order(name: str) -> tuple[str, int]:
    """A file name's place: a segment's prefix and number (not its text: 000010 after 000002), else its name."""
    segment = SEGMENT.fullmatch(name)
    return (segment[1], int(segment[2])) if segment else (name, -1)


def first_line(file: str) -> str:
    """A file's first line that is not blank (gzip-compressed when its name ends in ``.gz``), the rest not read."""
    with gzip.open(file, "rt", encoding="utf-8") if file.endswith(".gz") else open(file, encoding="utf-8") as lines:
        return next((line for line in lines if line.strip()), "")


def opens_trace(line: str) -> bool:
    """Whether a file's first line is a Dynamo record, enveloped or not."""
    try:
        return is_record(opened(json.loads(line)))
    except ValueError:
        return False


def opened(item: Any) -> Any:
    """A line's record: a file sink's envelope opened (its ``event``), a bare record as it is."""
    if isinstance(item, dict) and "schema" not in item and isinstance(item.get("event"), dict):
        return item["event"]
    return item


def is_record(item: Any) -> bool:
    return isinstance(item, dict) and item.get("schema") == SCHEMA


def requests_of(path: str, text: str) -> list[Request]:
    """A file's request_end records of a session, checked, in file order; lines without a schema (markers), tool
    events and records without an agent_context's session_id are left out."""
    requests = []
    for number, raw in numbered(text):
        record = opened(json_line(path, number, raw))
        if not isinstance(record, dict) or "schema" not in record:
            continue
        if record["schema"] != SCHEMA:
            raise ValueError(f"{path}:{number}: schema {record['schema']!r}, not {SCHEMA}")
        context = record.get("agent_context")
        if record.get("event_type") == REQUEST_END and isinstance(context, dict) and context.get("session_id"):
            requests.append(read_request(f"{path}:{number}", record, context))
    return requests


def read_request(where: str, record: dict, context: dict) -> Request:
    """One request_end record as a turn's request; ValueError ``where: not a Dynamo request_end (...)``."""
    try:
        request = record["request"]
        if not isinstance(request, dict) or not isinstance(replay := request.get("replay") or {}, dict):
            raise TypeError("request and its replay must be objects")
        received = optional_ms(request, "request_received_ms")
        received = ms(record, "event_time_unix_ms") if received is None else received
        total = optional_ms(request, "total_time_ms")
        end = max(ms(record, "event_time_unix_ms"), received) if total is None else received + total
        in_replay = replay.get("input_length") is not None
        hashes = replay.get("input_sequence_hashes")
        return Request(
            where,
            str(context["session_id"]).replace("/", "-"),
            str(context.get("parent_trajectory_id") or context.get("parent_session_id") or "").replace("/", "-"),
            received,
            end,
            whole(replay, "input_length", 1) if in_replay else whole(request, "input_tokens", 1),
            whole(request, "output_tokens", 0),
            () if hashes is None else sequence_hashes(hashes),
            None if hashes is None else whole(replay, "trace_block_size", 1),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: not a Dynamo request_end ({reason(e)})") from None


def ms(item: dict, key: str) -> float:
    value = item[key]
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < float("inf"):
        raise ValueError(f"{key} must be ms of at least 0, not {value!r}")
    return float(value)


def optional_ms(item: dict, key: str) -> float | None:
    """``ms``, None when the key is missing or null."""
    return None if item.get(key) is None else ms(item, key)


def sequence_hashes(hashes: Any) -> tuple[int, ...]:
    """Sequence hashes as hash ids: unsigned 64-bit whole numbers, kept as they are (a block's words are drawn from
    its id's text, so ids of any size make words)."""
    if not isinstance(hashes, list) or not all(
        isinstance(h, int) and not isinstance(h, bool) and 0 <= h < U64 for h in hashes
    ):
        raise ValueError("input_sequence_hashes must be a list of unsigned 64-bit whole numbers")
    return tuple(hashes)


def trace_sessions(path: str, requests: list[Request]) -> list[RecordedSession]:
    """A trace's requests as its top-level sessions (those without a parent in it), their subagents within, in the
    order they first appear."""
    if not requests:
        raise ValueError(f"{path}: no Dynamo request_end records with a session")
    trace = Trace(requests, block_size(requests))
    sessions = [trace.session(session_id) for session_id, parent in trace.parents.items() if not parent]
    if cycled := [own[0] for session_id, own in trace.requests.items() if session_id not in trace.built]:
        raise ValueError(f"{cycled[0].where}: session {cycled[0].session_id!r}: its parents lead back to it")
    return sessions


def block_size(requests: list[Request]) -> int | None:
    """The trace's one trace_block_size (None: no sequence hashes); ValueError at a request with another."""
    sized = [request for request in requests if request.block_tokens is not None]
    for request in sized:
        if request.block_tokens != sized[0].block_tokens:
            raise ValueError(
                f"{request.where}: trace_block_size {request.block_tokens}, not {sized[0].where}'s "
                f"{sized[0].block_tokens} (one block size a trace)"
            )
    return sized[0].block_tokens if sized else None


class Trace:
    """A trace's sessions: each one's requests in received order, its parent in the trace and its subagents."""

    def __init__(self, requests: list[Request], block_tokens: int | None) -> None:
        self.requests: dict[str, list[Request]] = {}
        for request in requests:
            self.requests.setdefault(request.session_id, []).append(request)
        for own in self.requests.values():
            own.sort(key=lambda request: request.received_ms)
        self.parents = {session_id: self.parent(session_id) for session_id in self.requests}
        self.agents: dict[str, list[str]] = {}  # each session's subagents, by their first request
        for agent in sorted(self.requests, key=lambda agent: self.requests[agent][0].received_ms):
            if parent := self.parents[agent]:
                self.agents.setdefault(parent, []).append(agent)
        self.block_tokens = block_tokens
        self.ids = itertools.count()  # a growing history's block ids, shared: no two sessions share a block
        self.built: set[str] = set()

    def parent(self, session_id: str) -> str:
        """The session's parent: the first its requests name that is another session of the trace ("": none)."""
        named = (request.parent_id for request in self.requests[session_id] if request.parent_id)
        parent = next(named, "")
        return parent if parent in self.requests and parent != session_id else ""

    def session(self, session_id: str, awaited: bool = True) -> RecordedSession:
        """A session's requests as its turns, each with the fan-out of the subagents launched before it."""
        self.built.add(session_id)
        pending = self.agents.get(session_id, [])
        history = GrowingHistory(self.ids)
        seen: set[int] = set()
        turns: list[RecordedTurn] = []
        previous: Request | None = None
        for request in self.requests[session_id]:
            launched = [agent for agent in pending if self.requests[agent][0].received_ms <= request.received_ms]
            pending = pending[len(launched) :]
            fanout = tuple(self.session(agent, self.end_ms(agent) <= request.received_ms) for agent in launched)
            begins = min([request.received_ms, *(self.requests[agent][0].received_ms for agent in launched)])
            gap = 0.0 if previous is None else max(begins - previous.end_ms, 0) / 1000
            hash_ids, reused = self.blocks(request, history, seen)
            turns.append(RecordedTurn(request.input_tokens, request.output_tokens, hash_ids, gap, reused, fanout))
            previous = request
        after = tuple(self.session(agent) for agent in pending)
        return RecordedSession(session_id, tuple(turns), self.block_tokens or HISTORY_BLOCK_TOKENS, "", after, awaited)

    def end_ms(self, session_id: str) -> float:
        return max(request.end_ms for request in self.requests[session_id])

    def blocks(self, request: Request, history: GrowingHistory, seen: set[int]) -> tuple[tuple[int, ...], int]:
        """A request's hash ids and how many an earlier request of its session had: its sequence hashes, or, in a
        trace without any, its session's growing history."""
        if self.block_tokens is None:
            hash_ids, reused = history.grown(request.input_tokens)
            history.answer(request.output_tokens)
            return hash_ids, reused
        reused = sum(h in seen for h in request.hash_ids)
        seen.update(request.hash_ids)
        return request.hash_ids, reused
