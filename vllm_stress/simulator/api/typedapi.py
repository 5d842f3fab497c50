"""What the simulator's other chat-shaped APIs (responsesapi.py, messagesapi.py) give the server: the events of a
streamed answer and the body of a whole one, for a chat request run over the same engine."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from .protocol import ChunkFormat


def typed_event(kind: str, data: bytes) -> bytes:
    """One SSE event as vLLM writes a typed stream's: its type on an ``event:`` line, its JSON on a ``data:`` line."""
    return b"event: %s\ndata: %s\n\n" % (kind.encode(), data)


@dataclass(frozen=True)
class Answer:
    """A finished answer, as a whole body reports it."""

    text: str
    finish_reason: str | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: not reported (vllm serve without --enable-prompt-tokens-details)


class TypedApi(Protocol):
    def stream_format(self, model: str, prompt_tokens: int, prompt_details: bool, line_ending: bytes) -> ChunkFormat:
        """The templates of the streamed answer's events (``streams.write_sse`` writes them)."""
        ...

    def whole(self, model: str, answer: Answer) -> dict:
        """The body of a non-streamed answer."""
        ...


ApiFactory = Callable[[int], TypedApi]  # the request's resolved max_tokens -> its answer's API
