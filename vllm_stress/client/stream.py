"""Reading a streamed (SSE) response into its parser (sse.py): the read of a body, by the batch reader (batchread.py)
on the sockets that time the bytes (timedsocket.py, made by pools.py), or in the user's greenlet."""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator
from typing import Any

from geventhttpclient.response import HTTPSocketPoolResponse

from vllm_stress.client.batchread import READ_SIZE, TRUNCATED, batch_reader
from vllm_stress.client.exchange import Exchange
from vllm_stress.client.readbehind import read_behind
from vllm_stress.client.sse import SSEParser
from vllm_stress.client.timedsocket import TimedSocket
from vllm_stress.core.failures import StreamError
from vllm_stress.core.kernelclock import KERNEL_PLATFORM

KERNEL_CLOCK = "kernel (SO_TIMESTAMPNS)"
USER_CLOCK = "user (perf_counter after each read)"
KERNEL_ENABLED = KERNEL_PLATFORM and os.environ.get("VLLM_STRESS_KERNEL_CLOCK", "1") != "0"  # =0: user clock
REPORT_KEY = "receive_clock"  # in worker reports, and the run.json key

clocks: dict[str, str] = {}  # process (worker id, "local") -> the clock its streaming users time chunks with


def receive_clock(url: str) -> str:
    """The clock the streaming users of this process use against ``url`` (docs/concepts/load-generator.md)."""
    return KERNEL_CLOCK if KERNEL_ENABLED and url.startswith("http://") else USER_CLOCK


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
