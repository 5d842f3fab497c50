"""Reading a streamed (SSE) response body: a pure event parser, and the socket layer that times the bytes.

**Parser** (:class:`SSEParser`, no I/O, unit-tested on its own): body bytes in, :class:`Exchange` updates out. Events
are split with bytes operations. A chunk in vLLM's own byte layout that carries output and nothing else (no finish
reason, no usage, no error) is recognised by the user class's ``output_marker`` without parsing its JSON: that is
most of a stream, and the client's CPU per token is what limits how many streams one worker can time. Every other
event (the role chunk, the first and last content chunks of a layout the marker does not know, the usage chunk,
errors, comments, multi-line events) is parsed in full.

**Socket layer** (:func:`read_body`): reads whatever the socket holds in one call, lets geventhttpclient's llhttp
parser remove the HTTP/1.1 chunked framing (C code, not the cost), and hands the body bytes to the parser with the
time they arrived. On Linux over plain HTTP that time is the kernel's: the socket has ``SO_TIMESTAMPNS`` set and is
read with ``recvmsg``, whose ``SCM_TIMESTAMPNS`` control message carries the arrival time of the newest TCP segment
the read returned, however late the read itself ran (a worker busy with a burst of 1,000 chunks reads the last of
them milliseconds late, but stamps it with its true arrival). That time is ``CLOCK_REALTIME``; it is converted to
the ``perf_counter`` clock of the request's send time through the pair of clock readings taken at the send
(:meth:`Exchange.sent`). Elsewhere (not Linux, or HTTPS: TLS records are decrypted in user space, so the kernel's
time of a segment is not the time of the chunk it decrypts to) a read is stamped with ``perf_counter`` when it
returns, as before. The clock each process used is in ``run.json`` (``receive_clock``).

One clock per response: vLLM often writes the first chunks right behind the headers, in the same segment, and
geventhttpclient reads them while it parses the headers. So the connections themselves are :class:`TimedSocket`
objects (:func:`use_timed_sockets`): every read, the header read included, keeps the kernel's arrival time of its
bytes, and the body bytes that came with the headers carry the header read's time. (Stamping only the body reads
would put a user-space time on those first chunks and kernel times on the rest: a later chunk before an earlier
one, TTFT above e2e.) The send time is the kernel's too: the connections ask for send timestamps (``SO_TIMESTAMPING``), and
the time the request's last bytes left replaces the one taken in user space before the request was built
(:meth:`Exchange.left`), so a worker descheduled between the two does not lengthen the TTFT it measures.
``VLLM_STRESS_KERNEL_CLOCK=0`` turns the kernel clock off.

Chunks that arrive in one read share its timestamp: their inter-token gaps are 0, which is what they were on the
wire (one segment, or segments the kernel already held together when the read ran). A client that reads late
merges more chunks into one read, but with kernel stamps those chunks still carry the newest segment's arrival, so
the merged gaps are at most the spread of the segments' arrival inside one read.
"""

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

from vllm_stress.client.exchange import Exchange, error_event
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

SSE_LINE_STARTS = (b":", b"data:", b"event:", b"id:", b"retry:", b"\r")  # comments, the SSE fields, CRLF ends
READ_SIZE = 64 * 1024  # one read takes whatever the socket holds, up to this
KERNEL_CLOCK = "kernel (SO_TIMESTAMPNS)"
USER_CLOCK = "user (perf_counter after each read)"
KERNEL_ENABLED = KERNEL_PLATFORM and os.environ.get("VLLM_STRESS_KERNEL_CLOCK", "1") != "0"  # =0: user clock
REPORT_KEY = "receive_clock"  # in worker reports, and the run.json key

clocks: dict[str, str] = {}  # process (worker id, "local") -> the clock its streaming users time chunks with


def receive_clock(url: str) -> str:
    """The clock the streaming users of this process use against ``url`` (see the module docstring)."""
    return KERNEL_CLOCK if KERNEL_ENABLED and url.startswith("http://") else USER_CLOCK


class SSEParser:
    """Turns the bytes of an OpenAI-style SSE body into ``exchange`` updates, each event timed with the ``now`` of
    the bytes that completed it."""

    __slots__ = ("exchange", "marker", "is_output", "rest", "done", "now")

    def __init__(self, exchange: Exchange, marker: bytes, is_output: Callable[[dict[str, Any]], bool]) -> None:
        self.exchange = exchange
        self.marker = marker  # bytes only an output-bearing chunk in vLLM's layout has
        self.is_output = is_output  # choice dict -> bool, for the chunks parsed in full
        self.rest = b""  # an incomplete event
        self.done = False  # data: [DONE] seen
        self.now = 0.0

    def feed(self, data: bytes, now: float) -> None:
        """Body bytes that arrived at ``now`` (perf_counter seconds)."""
        self.now = now
        events_ = (self.rest + data).split(b"\n\n")
        self.rest = events_.pop()
        marker = self.marker
        output = self.exchange.output
        for event in events_:
            if event.startswith(b"data: ") and b"\n" not in event:  # the usual event: one data line
                data = event[6:]
                if marker in data and b'"finish_reason":null' in data and b'"usage"' not in data:
                    output(now)
                else:
                    self.read_data(data)
            elif event:
                self.read_lines(event)

    def finish(self) -> None:
        """The body ended: an unterminated last event still counts; the stream must have ended with [DONE]."""
        if self.rest.strip():
            self.read_lines(self.rest)
            self.rest = b""
        self.exchange.check_stream_end(self.done)

    def read_lines(self, event: bytes) -> None:
        """Several lines, comments, or no space after "data:"."""
        lines = event.split(b"\n")
        if bad := next((line for line in lines if line and not line.startswith(SSE_LINE_STARTS)), None):
            raise StreamError("MalformedSSE", f"not an SSE line: {bad[:80]!r}")
        for line in lines:
            if line.startswith(b"data:"):
                self.read_data(line[5:].strip())

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
                exchange.output(self.now)
            if reason := choice.get("finish_reason"):
                exchange.finish_reason = reason


@contextlib.contextmanager
def deadline_only(stream: HTTPSocketPoolResponse) -> Iterator[None]:
    """Read a streamed body without the socket's own per-read timeout.

    The socket's timeout is ``--request-timeout`` (``network_timeout``), the same as the deadline around the whole
    body read, so during the body it adds nothing but its cost: gevent arms and cancels a timer on every wait, a
    tenth of the client's CPU per token at 1,000 streams. It is restored for the connection's next request.
    """
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
    """A gevent TCP socket whose every read keeps the kernel's arrival time of the bytes it returned (``arrived``,
    CLOCK_REALTIME seconds; None when the read carried no timestamp, e.g. at the end of the stream), and that keeps
    the kernel's time the last bytes it sent left (``left``; see :meth:`read_send_times`)."""

    __slots__ = ("arrived", "left")

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None) -> None:  # noqa: A002 (socket.socket's names)
        super().__init__(family, type, proto, fileno)
        self.arrived: float | None = None
        self.left: float | None = None
        self.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        self.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPING, SEND_TIMESTAMPS)

    def recv(self, size: int, flags: int = 0) -> bytes:
        # Wait first, then read the plain socket: gevent's own recvmsg reads first and, the body's bytes being all
        # taken, pays a failed syscall and an exception per chunk before it waits. The plain socket and the read
        # watcher are gevent's (_sock, _wait, _read_event: a subclass's, no public API waits on its own watcher).
        while True:
            self._wait(self._read_event)  # type: ignore[attr-defined]  # gevent's, private: not in types-gevent
            try:
                data, ancillary, _flags, _address = self._sock.recvmsg(size, BOTH_ANCILLARY_SIZE, flags)  # type: ignore[attr-defined]  # as above
            except BlockingIOError:  # woken without data: by a send timestamp on the error queue
                self.read_send_times()
                continue
            self.arrived = kernel_time(ancillary)
            return data

    def read_send_times(self) -> None:
        """Take the send timestamps off the error queue (while one waits there, the socket polls as readable):
        the newest, the time the last bytes sent so far left, becomes ``left``."""
        while True:
            try:
                _data, ancillary, _flags, _address = self._sock.recvmsg(0, BOTH_ANCILLARY_SIZE, MSG_ERRQUEUE)  # type: ignore[attr-defined]  # gevent's, private: not in types-gevent
            except (BlockingIOError, OSError):
                return
            self.left = kernel_time(ancillary, SO_TIMESTAMPING) or self.left


class TimedConnectionPool(ConnectionPool):
    """geventhttpclient's plain-HTTP connection pool with :class:`TimedSocket` connections, made in its socket
    factory (the place its docstring gives to change the socket)."""

    def _create_tcp_socket(self, family: int, socktype: int, protocol: int) -> gevent.socket.socket:
        return TimedSocket(family, socktype, protocol)


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
    """On a :class:`TimedSocket` connection, the request's send time becomes the kernel's time its last bytes left
    (call it once the response headers are in, before the request's deadline is counted from the send time).
    ``response`` may be a failed one, without a socket."""
    sock = getattr(response, "_sock", None)  # private: no public API hands out a response's socket
    if isinstance(sock, TimedSocket):
        sock.read_send_times()
        if sock.left is not None:
            exchange.left(sock.left)


def read_body(response: HTTPSocketPoolResponse, parser: SSEParser, exchange: Exchange) -> None:
    """Read a geventhttpclient response's streamed body to its end into ``parser``, timing each read: with the
    kernel's arrival time when the connection is a :class:`TimedSocket`, else perf_counter when the read returned.

    Uses geventhttpclient's private ``_sock`` and ``_body_buffer`` (no public API reads the raw socket of a
    response or takes the body bytes without reading more) and its public ``feed`` (llhttp: de-chunks into
    ``_body_buffer``, releases the socket to the pool at the message's end).
    """
    sock = response._sock  # private: no public API hands out a response's socket
    body = response._body_buffer  # private: the public read() would read the socket for more than the parser has
    clock = time.perf_counter
    timed = sock if isinstance(sock, TimedSocket) else None
    to_perf = exchange.start - exchange.start_real  # kernel (unix) time -> perf_counter time of this request
    if body:  # came with the headers: the header read's time
        arrived = timed.arrived if timed else None
        parser.feed(bytes(body), clock() if arrived is None else arrived + to_perf)
        del body[:]
    try:
        while not response.message_complete:
            if sock is None or response._sock is None:  # released: closed, or returned early to the pool
                raise StreamError("StreamTruncated", "connection closed before the end of the body")
            data = sock.recv(READ_SIZE)
            if not data:
                raise StreamError("StreamTruncated", "connection closed before the end of the body")
            arrived = timed.arrived if timed else None
            now = clock() if arrived is None else arrived + to_perf
            response.feed(data)
            if body:
                parser.feed(bytes(body), now)
                del body[:]
    except BaseException:
        response.release()
        raise
    parser.finish()


def report_clocks(client_id: str, data: dict[str, Any], **_kw: object) -> None:
    """A worker's ``report_to_master`` listener: its clock goes to the master with every report."""
    data[REPORT_KEY] = clocks


def receive_clocks(client_id: str, data: dict[str, Any], **_kw: object) -> None:
    """The master's ``worker_report`` listener."""
    clocks.update(data.get(REPORT_KEY) or {})
