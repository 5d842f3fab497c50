"""The SSE parser of a streamed (OpenAI-style) response: pure, bytes in and ``Exchange`` updates out; stream.py and the
batch reader (batchread.py) feed it."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from vllm_stress.client.exchange import Exchange, error_event, is_reasoning_delta
from vllm_stress.core.failures import StreamError


class SSEParser:
    """Turns the bytes of an OpenAI-style SSE body into ``exchange`` updates, each event timed with the ``now`` of
    the bytes that completed it.

    Lines and fields follow the WHATWG HTML standard's event-stream rules: a line ends at LF, CR or CRLF (also a CR
    at the end of one read and the LF at the start of the next); ``data:`` loses one leading space and an event's
    data lines are joined by LF; a line starting with ``:`` is a comment; ``event``, ``id`` and ``retry`` are valid
    fields without a use here (no listeners by type, no reconnection); a line without a colon is a field with an
    empty value; an empty line dispatches the event. Stricter than the standard, a field of another name fails the
    stream as ``MalformedSSE`` (no OpenAI-compatible server sends one: the body is not the stream it claims). Work is
    linear in the bytes: each read is split once, and a line left open is kept in pieces joined when it ends."""

    __slots__ = ("exchange", "marker", "is_output", "open_line", "data", "after_cr", "done", "now")
    end_event = "data: [DONE]"  # what ends a complete stream (a typed event stream names its closing event)

    def __init__(self, exchange: Exchange, marker: bytes, is_output: Callable[[dict[str, Any]], bool]) -> None:
        self.exchange = exchange
        self.marker = marker  # bytes only an output-bearing chunk in vLLM's layout has
        self.is_output = is_output  # choice dict -> bool, for the chunks parsed in full
        self.open_line: list[bytes] = []  # the pieces of a line not yet ended
        self.data: list[bytes] = []  # the data lines of the event not yet dispatched
        self.after_cr = False  # the last read ended with CR: an LF opening the next one ends no line
        self.done = False  # data: [DONE] seen
        self.now = 0.0

    def feed(self, data: bytes, now: float) -> None:
        """Body bytes that arrived at ``now`` (perf_counter seconds)."""
        self.now = now
        if self.after_cr and data:
            self.after_cr = False
            if data[:1] == b"\n":
                data = data[1:]
        if b"\r" in data:
            self.after_cr = data[-1:] == b"\r"
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        lines = data.split(b"\n")
        last = lines.pop()  # the start of a line not yet ended (often empty)
        if self.open_line and lines:
            self.open_line.append(lines[0])
            lines[0] = b"".join(self.open_line)
            self.open_line = []
        if last:
            self.open_line.append(last)
        event, marker, output = self.data, self.marker, self.exchange.output
        fast = self.exchange.text is None  # a canary's chunks are parsed in full: its answer's text is kept
        for line in lines:
            if line.startswith(b"data:"):
                event.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line:
                if line[:1] != b":":
                    self.field(line)
            elif fast and len(event) == 1 and marker in (one := event[0]) and b'"finish_reason":null' in one:
                event.clear()
                if b'"usage"' in one:  # vLLM's continuous usage: parsed in full
                    self.read_data(one)
                else:  # the usual event: an output chunk in vLLM's layout, no JSON parse
                    output(now)
            elif event:
                self.dispatch()

    def field(self, line: bytes) -> None:
        """A field line other than ``data: ...`` (which ``feed`` reads itself)."""
        name = line.partition(b":")[0]
        if name == b"data":  # "data" without a colon: an empty data line
            self.data.append(b"")
        elif name not in (b"event", b"id", b"retry"):
            raise StreamError("MalformedSSE", f"not an SSE line: {line[:80]!r}")

    def dispatch(self) -> None:
        """The event's data is complete (``feed`` counts the usual output chunk itself)."""
        lines = self.data  # the list feed appends to: emptied in place
        data = lines[0] if len(lines) == 1 else b"\n".join(lines)
        lines.clear()
        self.read_data(data)

    def finish(self) -> None:
        """The body ended: a last event without its empty line still counts (the standard would drop it); the
        stream must have ended with [DONE]."""
        if self.open_line:
            self.feed(b"\n", self.now)
        if self.data:
            self.dispatch()
        self.exchange.check_stream_end(self.done, self.end_event)

    def read_data(self, data: bytes) -> None:
        if data == b"[DONE]":
            self.done = True  # read on to the end of the body, so the connection is reused
            return
        chunk = json.loads(data)
        if not isinstance(chunk, dict):
            raise StreamError("MalformedJSON", f"an event that is not a JSON object: {chunk!r:.80}")
        if "error" in chunk:
            raise error_event(chunk)
        exchange = self.exchange
        if chunk.get("usage"):
            exchange.usage(chunk["usage"])
        if choices := chunk.get("choices"):
            choice = choices[0]
            if self.is_output(choice):
                exchange.output(self.now, is_reasoning_delta(choice.get("delta") or {}))
                if exchange.text is not None:  # chat's answer content, or a completion's text
                    exchange.keep_text(
                        (choice["delta"] or {}).get("content") if "delta" in choice else choice.get("text")
                    )
            if reason := choice.get("finish_reason"):
                exchange.finish_reason = reason
