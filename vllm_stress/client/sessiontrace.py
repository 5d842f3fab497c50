"""Recorded agent sessions (``--session-trace``): a session-trace JSONL file (plain or gzip) read into sessions of
turns, and each process's share of them handed to its session users one after another.

The format is the Mooncake trace line with a session id, as AIPerf's mooncake_trace loader and Dynamo's multi-turn
traces write it: one request a line, ``session_id``, ``input_length``, ``output_length``, ``hash_ids`` (the KV
blocks of the whole prompt, history included) and the gap before it, ``delay`` (ms after the previous turn's
answer) or, without one, the difference of ``timestamp`` (ms) from the session's previous line. A session's turns
are its lines in file order. Alibaba's Bailian traces are read too: a line's session is the first chat of its
``parent_chat_id`` chain, its ``timestamp`` in seconds, its blocks of 16 tokens. Agent traces are told by their
content: Weka's, with their subagents (wekatrace.py: a JSON trace, a JSONL file of them or a folder of ``.json``
ones), OpenTelemetry's OTLP/JSON exports (oteltrace.py), TraceLab's rounds (tracelabtrace.py) and NVIDIA Dynamo's
request traces (dynamotrace.py: a JSONL file, a folder of them or the prefix of its gzip segments).
"""

from __future__ import annotations

import argparse
import json
import os
import random

from .dynamotrace import dynamo_sessions, read_dynamo_files
from .oteltrace import otel_sessions
from .sessionmodel import RecordedSession, RecordedTurn
from .trace import BAILIAN, json_format, read_text
from .tracejson import JsonText
from .tracelabtrace import tracelab_sessions
from .wekatrace import read_weka_folder, weka_sessions

NO_PARENT = -1  # a Bailian line's parent_chat_id when it starts its session


def read_sessions(path: str) -> list[RecordedSession]:
    """The sessions of a session-trace file (``.gz``: gzip), Weka or Dynamo trace folder or Dynamo segment prefix, in
    the order they first appear; ValueError naming the file and line for a line that is not a session turn, or for a
    file without one."""
    if (traces := read_dynamo_files(path)) is not None:  # a folder of .jsonl files, or a prefix of segments
        return traces
    if os.path.isdir(path):
        return read_weka_folder(path)
    text = read_text(path)
    trace = JsonText(path, text)  # its first JSON value decoded once for all the agent trace readers
    for reader in (dynamo_sessions, weka_sessions, otel_sessions, tracelab_sessions):  # agent traces, by content
        if (traces := reader(trace)) is not None:
            return traces
    lines: dict[str, list[tuple[dict, int]]] = {}
    roots: dict[int, int] = {}  # a Bailian chat's session: the first chat of its parent chain
    for number, raw in enumerate(text.splitlines(), 1):
        if raw.strip():
            item = parse_line(path, number, raw, roots)
            lines.setdefault(str(item["session_id"]), []).append((item, number))
    if not lines:
        raise ValueError(f"{path}: no sessions in the trace")
    return [
        RecordedSession(session_id, session_turns(path, items), items[0][0]["block_tokens"])
        for session_id, items in lines.items()
    ]


def parse_line(path: str, number: int, raw: str, roots: dict[int, int]) -> dict:
    """One line's fields, checked: ValueError ``path:number: ...`` when it is not a session turn. A Bailian line's
    session is its chain's first chat (``roots`` holds those seen; a parent the file lacks starts the session)."""
    try:
        item = json.loads(raw)
        if not isinstance(item, dict):
            raise KeyError("session_id")
        fmt = json_format(item)
        if fmt is BAILIAN:
            chat, parent = int(item["chat_id"]), int(item.get("parent_chat_id", NO_PARENT))
            roots[chat] = chat if parent == NO_PARENT else roots.get(parent, parent)
            item["session_id"] = f"chat-{roots[chat]}"
        if item.get("session_id") is None:
            raise KeyError("session_id")
        checked = {
            "session_id": item["session_id"],
            "input_length": int(item["input_length"]),
            "output_length": int(item["output_length"]),
            "hash_ids": tuple(int(h) for h in item.get("hash_ids") or ()),
            "delay": None if item.get("delay") is None else float(item["delay"]) / 1000,
            "timestamp": None if item.get("timestamp") is None else float(item["timestamp"]) * fmt.timestamp_s,
            "block_tokens": fmt.block_tokens,
        }
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{path}:{number}: not a session-trace line ({type(e).__name__}: {e})") from None
    if checked["input_length"] < 1 or checked["output_length"] < 1:
        raise ValueError(f"{path}:{number}: input_length and output_length must be at least 1")
    if (checked["delay"] or 0) < 0:
        raise ValueError(f"{path}:{number}: a negative delay")
    return checked


def session_turns(path: str, items: list[tuple[dict, int]]) -> tuple[RecordedTurn, ...]:
    """A session's lines as turns: each one's gap and the blocks it shares with the turns before it."""
    turns: list[RecordedTurn] = []
    seen: set[int] = set()
    previous: dict | None = None
    for item, number in items:
        gap = 0.0 if previous is None else recorded_gap(previous, item)
        if gap < 0:
            raise ValueError(f"{path}:{number}: its timestamp is before the session's previous line")
        hash_ids = item["hash_ids"]
        reused = sum(h in seen for h in hash_ids)
        turns.append(RecordedTurn(item["input_length"], item["output_length"], hash_ids, gap, reused))
        seen.update(hash_ids)
        previous = item
    return tuple(turns)


def recorded_gap(previous: dict, item: dict) -> float:
    """Seconds idle before ``item``: its delay, else its timestamp less the previous line's (0 when neither says)."""
    if item["delay"] is not None:
        return float(item["delay"])
    if item["timestamp"] is not None and previous["timestamp"] is not None:
        return float(item["timestamp"] - previous["timestamp"])
    return 0.0


def parse_start_share(text: str) -> tuple[float, float] | None:
    """``--session-start MIN,MAX`` (one number: both) as (MIN, MAX), None for ""; ValueError for anything but
    0 <= MIN <= MAX <= 1."""
    if not text:
        return None
    try:
        low, _, high = text.partition(",")
        share = (float(low), float(high or low))
    except ValueError:
        raise ValueError(f"--session-start {text!r}: MIN,MAX shares of a session's turns, e.g. 0.25,0.75") from None
    if not 0 <= share[0] <= share[1] <= 1:
        raise ValueError(f"--session-start {text!r}: 0 <= MIN <= MAX <= 1")
    return share


def start_turn(session: RecordedSession, share: tuple[float, float], rng: random.Random) -> int:
    """The turns of ``session`` a joining user skips: a share drawn from ``share`` of them, rounded down, at most
    all but the last."""
    return min(int(rng.uniform(*share) * len(session.turns)), len(session.turns) - 1)


def capped_gap(gap_s: float, cap_s: float | None) -> float:
    """The idle time a replay keeps: the recorded gap, at most ``--idle-gap-cap`` seconds (None: uncapped)."""
    return gap_s if cap_s is None else min(gap_s, max(cap_s, 0.0))


class SessionDeck:
    """This process's share of the sessions, dealt one after another to whichever user asks next; after the last
    the deck starts over, its ``replay`` number counting the passes. ``salt`` and the pass make the block words
    (``salt_of``): a session replayed again finds nothing of its previous pass, nor of a previous run with another
    salt, in the prefix cache."""

    def __init__(self, sessions: list[RecordedSession], salt: str = "") -> None:
        self.sessions = sessions
        self.salt = salt
        self.dealt = 0

    def salt_of(self, replay: int) -> str:
        """The block words' salt of pass ``replay``: the same in every process with the same deck salt."""
        return f"{self.salt}-{replay}-"

    def deal(self) -> tuple[RecordedSession, int]:
        """The next session and its pass (0 the first time through)."""
        session = self.sessions[self.dealt % len(self.sessions)]
        replay = self.dealt // len(self.sessions)
        self.dealt += 1
        return session, replay


def deck_for(options: argparse.Namespace, sessions: list[RecordedSession], worker_index: int) -> SessionDeck:
    """This process's deck: every ``workers``-th session from its index, salted by ``--session-seed`` (the same
    words in every worker and every run with that seed), else by a new salt per process (a rerun finds nothing of
    the last run in the cache; blocks sessions share are then shared within a worker's sessions only)."""
    workers = max(getattr(options, "expect_workers", 1) or 1, 1) if getattr(options, "worker", False) else 1
    share = sessions[worker_index % workers :: workers]
    if not share:
        raise ValueError(f"{len(sessions)} sessions cannot give each of {workers} workers one")
    seed = options.session_seed
    salt = f"seed{seed}" if seed is not None else f"run{random.randrange(2**32)}"
    return SessionDeck(share, salt)
