"""The batch reader (vllm_stress/client/batchread.py): several streams read by one greenlet measure what each would
alone, however the server's bytes are cut into reads, and a broken stream fails its own user only."""

from __future__ import annotations

import socket
import threading
import time

import gevent
import pytest

from vllm_stress.client.batchread import batch_reader
from vllm_stress.client.exchange import Exchange
from vllm_stress.client.pools import TimedClientPool
from vllm_stress.client.readbehind import read_behind
from vllm_stress.client.sse import SSEParser
from vllm_stress.client.stream import read_body
from vllm_stress.core.failures import StreamError
from vllm_stress.core.kernelclock import KERNEL_PLATFORM

CHAT_MARKER = b'"delta":{"content":"'
EVENT = b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
LAST = (
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"x"},'
    b'"finish_reason":"length"}]}\n\n'
    b'data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,'
    b'"total_tokens":8}}\n\n'
    b"data: [DONE]\n\n"
)
HEADERS = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
GAP_S = 0.03

pytestmark = pytest.mark.skipif(not KERNEL_PLATFORM, reason="the batch reader reads kernel-timed (Linux) sockets")


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def serve(server: socket.socket, segments: list[bytes], close_early: bool = False) -> None:
    """One streamed response: the headers, then each of ``segments`` (HTTP chunks) GAP_S apart."""
    connection, _ = server.accept()
    with connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while b"\r\n\r\n" not in connection.recv(4096):
            pass
        connection.sendall(HEADERS)
        for segment in segments:
            time.sleep(GAP_S)
            connection.sendall(segment)
        if not close_early:
            connection.sendall(b"0\r\n\r\n")
            connection.recv(1)  # until the client closes


def one_event_per_read() -> list[bytes]:
    return [http_chunk(EVENT) for _ in range(4)] + [http_chunk(LAST)]


def all_events_in_one_read() -> list[bytes]:
    return [b"".join(one_event_per_read())]


def read_one(segments: list[bytes], close_early: bool = False) -> gevent.Greenlet:
    """A greenlet that requests one streamed body from a server sending ``segments`` and returns its exchange."""
    server = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=serve, args=(server, segments, close_early), daemon=True).start()

    def request() -> Exchange:
        with server:
            pool = TimedClientPool(network_timeout=30, connection_timeout=30)
            exchange = Exchange("t", 1, None, 5, check_output=True)
            exchange.sent()
            response = pool.get_client(f"http://127.0.0.1:{server.getsockname()[1]}/").request("GET", "/")
            try:
                read_body(response, SSEParser(exchange, CHAT_MARKER, lambda choice: True), exchange)
            finally:
                pool.close()
            return exchange

    return gevent.spawn(request)


def result(greenlet: gevent.Greenlet) -> Exchange:
    exchange = greenlet.get()
    assert isinstance(exchange, Exchange)
    return exchange


def test_streams_read_together_measure_what_each_would_alone():
    read_behind.samples[:] = read_behind.samples[:0]
    spread, together = read_one(one_event_per_read()), read_one(all_events_in_one_read())
    gevent.joinall([spread, together], timeout=30, raise_error=True)
    for exchange in map(result, (spread, together)):
        assert (exchange.chunks, exchange.completion_tokens, exchange.prompt_tokens) == (5, 5, 3)
        assert exchange.finish_reason == "length" and exchange.measured
        assert len(exchange.gaps) == 4
    # the kernel's arrival times: GAP_S apart (two segments read late in one read share the later one's)
    apart = result(spread)
    assert min(apart.gaps) >= 0 and apart.last is not None and apart.first is not None
    assert apart.last - apart.first >= GAP_S * 0.9
    assert result(together).gaps == [0.0] * 4  # one read: one arrival time for its five events
    assert len(read_behind.samples) >= 6  # a read-behind sample per kernel-timed read of the body
    assert not batch_reader().streams


def test_a_broken_stream_fails_alone_and_leaves_the_reader():
    broken, whole = read_one(one_event_per_read()[:2], close_early=True), read_one(one_event_per_read())
    gevent.joinall([broken, whole], timeout=30)
    assert isinstance(broken.exception, StreamError) and broken.exception.name == "StreamTruncated"
    assert result(whole).chunks == 5
    assert not batch_reader().streams
