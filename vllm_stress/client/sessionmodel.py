"""A recorded session as the session user replays it, whatever trace it was read from (sessiontrace.py's JSONL lines,
wekatrace.py's agent traces): its turns, each one's gap and KV blocks, and the subagent sessions an agent fans out to
before a turn."""

from __future__ import annotations

from dataclasses import dataclass

from .trace import MOONCAKE_BLOCK_TOKENS


@dataclass(frozen=True)
class RecordedTurn:
    """One turn of a recorded session."""

    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...]
    gap_s: float  # recorded idle time before it (before its fan-out, if any; 0 for a session's first turn)
    reused_blocks: int  # of its hash ids, those an earlier turn of the session had
    # subagent sessions launched together just before it (a fan-out); it is sent once the awaited ones ended (the join)
    fanout: tuple[RecordedSession, ...] = ()


@dataclass(frozen=True)
class RecordedSession:
    session_id: str
    turns: tuple[RecordedTurn, ...]
    block_tokens: int = MOONCAKE_BLOCK_TOKENS  # tokens of one of its hash ids' blocks, as its format has them
    block_salt: str = ""  # added to its block words' salt: a trace whose hash ids are its own, not shared
    after: tuple[RecordedSession, ...] = ()  # subagents launched after its last turn: it ends when the awaited end
    awaited: bool = True  # as a subagent: its parent waits for it (False: launched asynchronously, not joined)


def subagents(session: RecordedSession) -> tuple[RecordedSession, ...]:
    """The subagents ``session`` launches itself (not theirs), in order."""
    return tuple(agent for turn in session.turns for agent in turn.fanout) + session.after


def most_in_flight(session: RecordedSession) -> int:
    """The most requests a replay of ``session`` can have in flight at once: one per session, subagents included."""
    return 1 + sum(most_in_flight(agent) for agent in subagents(session))
