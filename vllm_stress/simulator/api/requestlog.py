"""The simulator's own per-request timing record (``--request-log``), for checking a client's latencies against the
server's (docs/concepts/simulator.md, section 12)."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Mapping

from vllm_stress.core.kernelclock import ANCILLARY_SIZE, KERNEL_PLATFORM, SO_TIMESTAMPNS, kernel_time

REQUEST_ID_HEADER = "X-Request-Id"


class ArrivalSocket(socket.socket):
    """An accepted connection whose reads keep the kernel's receive time of their newest segment (``arrived``,
    unix seconds). asyncio's transport reads it with ``recv``; uvloop reads the descriptor itself and never calls it."""

    arrived: float | None = None

    def recv(self, size: int, flags: int = 0) -> bytes:
        data, ancillary, _flags, _address = self.recvmsg(size, ANCILLARY_SIZE, flags)
        self.arrived = kernel_time(ancillary) or self.arrived
        return data


class RequestTiming:
    """The server-side timestamps of one request (docs/concepts/simulator.md, section 12)."""

    __slots__ = (
        "request_id",
        "peer",
        "arrival",
        "arrival_clock",
        "first",
        "first_sent",
        "last",
        "chunks",
        "queue",
        "messages",
        "answer",
        "tool_call",
        "model",
        "header_names",
        "path",
        "prompt_tokens",
        "completion_tokens",
        "cached_tokens",
        "finish_reason",
        "inputs",
    )

    def __init__(
        self, request_id: str, arrived: float | None = None, peer: str = "", header_names: tuple[str, ...] = ()
    ) -> None:
        self.request_id = request_id
        self.header_names = header_names  # the names (not the values) of the request's headers, lower case
        self.peer = peer  # the client's address (its source address: which one a client spreading them used)
        self.arrival = time.time() if arrived is None else arrived
        self.arrival_clock = "user" if arrived is None else "kernel"
        self.first: float | None = None
        self.first_sent: float | None = None  # the first output write returned: its bytes were with the kernel
        self.last: float | None = None
        self.chunks = 0
        self.queue: float | None = None  # seconds its (first) sequence waited in the engine's queue
        self.messages: list | None = None  # a chat request's messages, as sent (a conversation's history)
        self.answer: str | None = None  # its first choice's text as generated (a tool call's arguments)
        self.tool_call: dict | None = None  # {"id", "name"} of the tool call it answered with
        self.model = ""  # the model that answered it: the served model or the LoRA adapter it named
        self.path = ""  # the API path it came to (/v1/chat/completions, /v1/responses, /v1/messages ...)
        self.prompt_tokens: int | None = None  # the engine's counts: all its prompts' tokens, its first choice's output
        self.completion_tokens: int | None = None  # (an aborted one's up to its abort)
        self.cached_tokens: int | None = None  # its (first) sequence's prompt tokens found in the prefix cache
        self.finish_reason: str | None = None  # its (first) sequence's: stop, length, or abort when the client left
        self.inputs: int | None = None  # a pooling request's inputs (embeddings) or pairs (rerank, score), else None

    def output_write(self) -> None:
        """A write carrying output tokens is about to hand its bytes to the socket."""
        now = time.time()
        if self.first is None:
            self.first = now
        self.last = now
        self.chunks += 1

    def output_sent(self) -> None:
        """A write carrying output tokens returned (``first`` to ``first_sent`` brackets the first one's send)."""
        if self.first_sent is None and self.first is not None:
            self.first_sent = time.time()


class RequestLog:
    """One JSON line per logged request, buffered; ``close()`` flushes it."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115 (closed by close())
        self.connections: dict[int, ArrivalSocket] = {}  # by file descriptor (a reused one is overwritten)

    def listening(self, listener: socket.socket) -> None:
        """Have the kernel stamp the arrival of every segment of the connections ``listener`` accepts."""
        if KERNEL_PLATFORM:
            listener.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)

    def accepted(self, connection: socket.socket) -> socket.socket:
        """The accepted ``connection`` as an :class:`ArrivalSocket` (where the kernel stamps arrivals)."""
        if not KERNEL_PLATFORM:
            return connection
        timed = ArrivalSocket(connection.family, connection.type, connection.proto, fileno=connection.detach())
        timed.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.connections[timed.fileno()] = timed
        return timed

    def timing(
        self, headers: Mapping[str, str], transport: asyncio.BaseTransport | None, path: str = ""
    ) -> RequestTiming | None:
        """The record of a request to ``path`` with an ``X-Request-Id`` that came in on ``transport`` (aiohttp's)."""
        request_id = headers.get(REQUEST_ID_HEADER)
        if not request_id:
            return None
        sock = transport.get_extra_info("socket") if transport else None
        connection = self.connections.get(sock.fileno()) if sock else None
        peer = transport.get_extra_info("peername") if transport else None
        names = tuple(sorted({name.lower() for name in headers}))
        timing = RequestTiming(request_id, connection.arrived if connection else None, peer[0] if peer else "", names)
        timing.path = path
        return timing

    def write(self, timing: RequestTiming) -> None:
        record = {
            "id": timing.request_id,
            "peer": timing.peer,
            "arrival": timing.arrival,
            "arrival_clock": timing.arrival_clock,
            "first": timing.first,
            "first_sent": timing.first_sent,
            "last": timing.last,
            "end": time.time(),
            "chunks": timing.chunks,
            "queue": timing.queue,
            "model": timing.model,
            "headers": timing.header_names,
            "path": timing.path,
            "prompt_tokens": timing.prompt_tokens,
            "completion_tokens": timing.completion_tokens,
            "cached_tokens": timing.cached_tokens,
            "finish_reason": timing.finish_reason,
        }
        if timing.inputs is not None:
            record["inputs"] = timing.inputs
        if timing.messages is not None:  # a chat request: its history and what it answered
            record |= {"messages": timing.messages, "answer": timing.answer, "tool_call": timing.tool_call}
        self._file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self._file.close()


def read_request_log(path: str) -> dict[str, dict]:
    """The records of a request log, by request id."""
    with open(path, encoding="utf-8") as f:
        return {record["id"]: record for record in map(json.loads, f)}
