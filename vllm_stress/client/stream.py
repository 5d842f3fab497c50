"""Reading a streamed (SSE) response: a pure event parser, and the socket layer that times the bytes."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import gevent.socket
from geventhttpclient.client import HTTPClient, HTTPClientPool
from geventhttpclient.connectionpool import ConnectionPool
from geventhttpclient.response import HTTPSocketPoolResponse
from geventhttpclient.url import URL

from vllm_stress.client.batchread import READ_SIZE, TRUNCATED, batch_reader
from vllm_stress.client.exchange import Exchange, error_event, is_reasoning_delta
from vllm_stress.client.readbehind import read_behind
from vllm_stress.client.sourceaddr import SOURCES
from vllm_stress.core.failures import StreamError
from vllm_stress.core.kernelclock import (
    BOTH_ANCILLARY_SIZE,
    KERNEL_PLATFORM,
    MSG_ERRQUEUE,
    SEND_TIMESTAMPS,
    SO_TIMESTAMPING,
    SO_TIMESTAMPNS,
    kernel_time,
)

if TYPE_CHECKING:
    from locust.contrib.fasthttp import FastHttpSession

KERNEL_CLOCK = "kernel (SO_TIMESTAMPNS)"
USER_CLOCK = "user (perf_counter after each read)"
KERNEL_ENABLED = KERNEL_PLATFORM and os.environ.get("VLLM_STRESS_KERNEL_CLOCK", "1") != "0"  # =0: user clock
REPORT_KEY = "receive_clock"  # in worker reports, and the run.json key

clocks: dict[str, str] = {}  # process (worker id, "local") -> the clock its streaming users time chunks with


def receive_clock(url: str) -> str:
    """The clock the streaming users of this process use against ``url`` (docs/concepts/load-generator.md)."""
    return KERNEL_CLOCK if KERNEL_ENABLED and url.startswith("http://") else USER_CLOCK


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


@contextlib.contextmanager
def deadline_only(stream: HTTPSocketPoolResponse) -> Iterator[None]:
    """Read a streamed body under the request's deadline only: the socket's per-read timeout is lifted meanwhile
    (it adds nothing but a timer per wait) and restored for the connection's next request."""
    sock = stream._sock  # geventhttpclient keeps it private; it goes back to the user's pool at the body's end
    if sock is None:
        yield
        return
    timeout = sock.gettimeout()
    sock.settimeout(None)
    try:
        yield
    finally:
        sock.settimeout(timeout)


class TimedSocket(gevent.socket.socket):
    """A gevent TCP socket that keeps the kernel's arrival time of the bytes its last read returned (``arrived``,
    CLOCK_REALTIME seconds, None without a timestamp) and the time the last bytes it sent left (``left``)."""

    __slots__ = ("arrived", "left")

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None) -> None:
        super().__init__(family, type, proto, fileno)
        self.arrived: float | None = None
        self.left: float | None = None
        self.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, SEND_TIMESTAMPS)

    def recv(self, size: int, flags: int = 0) -> bytes:
        # Wait first, then read the plain socket: gevent's own recvmsg reads first and, the body's bytes being all
        # taken, pays a failed syscall and an exception per chunk before it waits. The plain socket and the read
        # watcher are gevent's (_sock, _wait, _read_event: a subclass's, no public API waits on its own watcher);
        # types-gevent leaves these private members out.
        wait, readable, plain = self._wait, self._read_event, self._sock  # type: ignore[attr-defined]
        while True:
            wait(readable)
            try:
                data, ancillary, _flags, _address = plain.recvmsg(size, BOTH_ANCILLARY_SIZE, flags)
            except BlockingIOError:  # woken without data: by a send timestamp on the error queue
                self.read_send_times()
                continue
            self.arrived = kernel_time(ancillary)
            return data

    def read_send_times(self) -> None:
        """Take the send timestamps off the error queue (while one waits there, the socket polls as readable):
        the newest, the time the last bytes sent so far left, becomes ``left``."""
        plain = self._sock  # type: ignore[attr-defined]  # gevent's plain socket (as in recv)
        while True:
            try:
                _data, ancillary, _flags, _address = plain.recvmsg(0, BOTH_ANCILLARY_SIZE, MSG_ERRQUEUE)
            except (BlockingIOError, OSError):
                return
            self.left = kernel_time(ancillary, SO_TIMESTAMPING) or self.left


class TimedConnectionPool(ConnectionPool):
    """geventhttpclient's plain-HTTP connection pool with :class:`TimedSocket` connections, made in its socket
    factory (the place its docstring gives to change the socket), each bound to the process's next source address
    (sourceaddr.py)."""

    def _create_tcp_socket(self, family: int, socktype: int, protocol: int) -> gevent.socket.socket:
        sock = TimedSocket(family, socktype, protocol)
        SOURCES.bind(sock)
        return sock

    def _connect_socket(self, sock: gevent.socket.socket, address: Any) -> gevent.socket.socket:
        try:
            return super()._connect_socket(sock, address)
        except OSError as e:
            SOURCES.out_of_ports(e, f"{address[0]}:{address[1]}")
            raise


class TimedClientPool(HTTPClientPool):
    """geventhttpclient's per-host client factory, whose plain-HTTP connections are :class:`TimedSocket` objects."""

    def get_client(self, url: str | URL) -> HTTPClient:
        client = super().get_client(url)
        if not client.ssl:  # TLS is decrypted in user space: the kernel's time is not the chunk's
            # HTTPClient builds its ConnectionPool inline (no argument picks the class), so the pool it made
            # becomes a TimedConnectionPool.
            client._connection_pool.__class__ = TimedConnectionPool
        return client


def use_timed_sockets(session: FastHttpSession) -> None:
    """Make a Locust ``FastHttpSession``'s connections :class:`TimedSocket` objects (its geventhttpclient
    ``UserAgent`` is ``session.client``; its ``clientpool`` is rebuilt with the same arguments)."""
    agent = session.client
    agent.clientpool = TimedClientPool(**agent.clientpool.client_args)


def use_send_time(response: HTTPSocketPoolResponse, exchange: Exchange) -> None:
    """On a :class:`TimedSocket` connection, the request's send time becomes the kernel's time its last bytes left.
    Call it once the headers are in, before the deadline is counted; a failed ``response`` has no socket."""
    sock = getattr(response, "_sock", None)  # private: no public API hands out a response's socket
    if isinstance(sock, TimedSocket):
        sock.read_send_times()
        if sock.left is not None:
            exchange.left(sock.left)


def read_body(response: HTTPSocketPoolResponse, parser: SSEParser, exchange: Exchange) -> None:
    """Read a geventhttpclient response's streamed body to its end into ``parser``. On a :class:`TimedSocket` the
    process's batch reader (batchread.py) reads it, each read timed by the kernel's arrival time (its read-behind
    time noted, readbehind.py); else this greenlet reads it, each read timed by perf_counter when it returned.
    ``response.feed`` (llhttp) de-chunks into the body buffer and releases the socket to the pool at the message's
    end."""
    sock = response._sock  # private: no public API hands out a response's socket
    body = response._body_buffer  # private: the public read() would read the socket for more than the parser has
    timed = sock if isinstance(sock, TimedSocket) else None
    read_behind.trim()
    if body:  # came with the headers: the header read's time
        arrived = timed.arrived if timed else None
        parser.feed(
            bytes(body), time.perf_counter() if arrived is None else arrived + exchange.start - exchange.start_real
        )
        del body[:]
    try:
        if response.message_complete:
            pass
        elif timed is not None and response._sock is timed:
            batch_reader().read(response, parser, timed, exchange.start - exchange.start_real)
        else:
            read_untimed(response, parser)
    except BaseException:
        response.release()
        raise
    parser.finish()


def read_untimed(response: HTTPSocketPoolResponse, parser: SSEParser) -> None:
    """Read the body in this greenlet, each read timed by perf_counter when it returned (HTTPS, the user clock)."""
    sock, body, clock = response._sock, response._body_buffer, time.perf_counter
    while not response.message_complete:
        if sock is None or response._sock is None:  # released: closed, or returned early to the pool
            raise StreamError("StreamTruncated", TRUNCATED)
        data = sock.recv(READ_SIZE)
        if not data:
            raise StreamError("StreamTruncated", TRUNCATED)
        now = clock()
        response.feed(data)
        if body:
            parser.feed(bytes(body), now)
            del body[:]


def report_clocks(client_id: str, data: dict[str, Any], **_kw: object) -> None:
    """A worker's ``report_to_master`` listener: its clock goes to the master with every report."""
    data[REPORT_KEY] = clocks


def receive_clocks(client_id: str, data: dict[str, Any], **_kw: object) -> None:
    """The master's ``worker_report`` listener."""
    clocks.update(data.get(REPORT_KEY) or {})
