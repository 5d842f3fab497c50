"""The stream reader (vllm_stress/client/stream.py): the SSE parser on vLLM's chunk shapes, and kernel receive times."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import pytest

from vllm_stress.client.exchange import Exchange
from vllm_stress.client.pools import TimedClientPool
from vllm_stress.client.sse import SSEParser
from vllm_stress.client.stream import read_body, use_send_time
from vllm_stress.core.failures import StreamError
from vllm_stress.core.kernelclock import KERNEL_PLATFORM, SO_TIMESTAMPNS, kernel_time
from vllm_stress.simulator.api.protocol import DONE, ChunkFormat
from vllm_stress.users.chat import ChatUser
from vllm_stress.users.completions import CompletionsUser

SHAPES = json.loads((Path(__file__).parent / "fixtures" / "vllm_shapes.json").read_text())
CHAT_MARKER = b'"delta":{"content":"'  # locustfiles/chat.py
COMPLETIONS_MARKER = b'"choices":[{"index":0,"text":"'  # locustfiles/completions.py
FILLERS = {
    "delta": None,
    "finish_reason": None,
    "index": 0,
    "logprobs": None,
    "text": "x",
    "token_ids": [1],
    "prompt_token_ids": None,
    "prompt_text": None,
    "stop_reason": None,
    "created": 1,
    "model": "m",
    "system_fingerprint": None,
}


def chunk_from_shape(shape: dict) -> dict:
    """A JSON chunk with the captured keys (sorted, so vLLM's byte layout is not assumed) and plausible values."""
    chunk = {key: FILLERS.get(key) for key in shape["keys"]} | {"object": shape["object"], "id": shape["id"] + "1"}
    if "choice" in shape:
        choice = {key: FILLERS.get(key) for key in shape["choice"]} | {"finish_reason": shape["finish_reason"]}
        if "delta" in shape:
            choice["delta"] = {"role": "assistant", "content": ""} if "role" in shape["delta"] else {"content": "x"}
        chunk["choices"] = [choice]
    if "usage" in shape:
        chunk["usage"] = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    return chunk


def sse_body(kind: str) -> bytes:
    events = [
        c if isinstance(c, str) else json.dumps(chunk_from_shape(c), sort_keys=True) for c in SHAPES[kind]["chunks"]
    ]
    return b"".join(b"data: " + event.encode() + b"\n\n" for event in events)


def chat_is_output(choice: dict) -> bool:
    return ChatUser.is_output(ChatUser, choice)  # the chat user's own rule


def parse(body: bytes, marker: bytes, is_output, pieces: list[int] = ()) -> Exchange:
    """Feed ``body`` cut at ``pieces`` offsets, the n-th piece at time n."""
    exchange = Exchange("t", 1, None, 5, check_output=False)
    exchange.start = 0.0
    parser = SSEParser(exchange, marker, is_output)
    cuts = [0, *pieces, len(body)]
    for n, (a, b) in enumerate(zip(cuts, cuts[1:], strict=False)):
        parser.feed(body[a:b], float(n + 1))
    parser.finish()
    return exchange


@pytest.mark.parametrize(
    "kind, marker, is_output, expected",
    [  # counted by hand in the captures: chat's first chunk is its role (no output), then four content chunks
        ("chat_stream", CHAT_MARKER, chat_is_output, 4),
        (
            "completions_stream",
            COMPLETIONS_MARKER,
            lambda choice: CompletionsUser.is_output(CompletionsUser, choice),
            4,
        ),
    ],
)
def test_captured_vllm_shapes_give_their_output_chunks_and_usage_however_the_bytes_are_cut(
    kind, marker, is_output, expected
):
    body = sse_body(kind)
    whole = parse(body, marker, is_output)
    assert (whole.chunks, whole.completion_tokens, whole.prompt_tokens, whole.finish_reason) == (
        expected,
        5,
        7,
        "length",
    )
    assert whole.ttft == 1.0 and whole.gaps == [0.0] * (expected - 1)  # one read: one timestamp
    for cut in range(1, len(body)):
        split = parse(body, marker, is_output, [cut])
        assert (split.chunks, split.completion_tokens, split.finish_reason) == (expected, 5, "length")
        first_event_end = body.index(b"\n\n", body.index(b"\n\n") + 2 if kind == "chat_stream" else 0) + 2
        assert split.ttft == (1.0 if cut >= first_event_end else 2.0)  # the time of the bytes that completed it


def test_the_fast_path_counts_what_a_full_parse_counts_on_vllm_byte_layout():
    """The simulator's chunks are byte-for-byte vLLM's layout (test_fidelity): most skip JSON, none is lost."""
    fmt = ChunkFormat(True, "m", False, 7)
    body = fmt.role(0) + b"".join(fmt.content(0, b"w ", None, n - 1, n) for n in range(1, 5))
    body += fmt.content(0, b"end", "length", 4, 5) + fmt.usage(5) + DONE
    fast = parse(body, CHAT_MARKER, chat_is_output, list(range(7, len(body), 97)))
    full = parse(body, b"\0", chat_is_output, list(range(7, len(body), 97)))
    assert (fast.chunks, fast.completion_tokens, fast.finish_reason) == (5, 5, "length")
    assert (fast.chunks, fast.first, fast.gaps) == (full.chunks, full.first, full.gaps)


@pytest.mark.parametrize(
    "body, error",
    [
        (b'data: {"choices":[{"text":"a"}]}\n\n', "StreamTruncated"),
        (b"data: [DONE]\n\n", "NoOutput"),
        (b"oops\n\ndata: [DONE]\n\n", "MalformedSSE"),
        (b'data: {"error":{"type":"Busy"}}\n\n', "StreamError Busy"),
    ],
)
def test_broken_streams_fail_with_their_class(body, error):
    with pytest.raises(StreamError) as caught:
        parse(body, COMPLETIONS_MARKER, lambda choice: "text" in choice)
    assert caught.value.name == error


@pytest.mark.skipif(not KERNEL_PLATFORM, reason="SO_TIMESTAMPNS is Linux's")
def test_a_late_read_still_gets_the_bytes_arrival_time():
    with socket.create_server(("127.0.0.1", 0)) as server, socket.create_connection(server.getsockname()) as client:
        accepted, _ = server.accept()
        with accepted:
            accepted.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            stamps_on(client, accepted)
            before = time.time()
            client.sendall(b"data: x\n\n")
            sent = time.time()
            time.sleep(0.2)
            data, ancillary, _flags, _address = accepted.recvmsg(1024, 64)
            read = time.time()
    arrived = kernel_time(ancillary)
    assert data == b"data: x\n\n"
    assert arrived is not None and before <= arrived <= sent < read - 0.2


def stamps_on(sender: socket.socket, receiver: socket.socket) -> None:
    """Wait until the kernel stamps what ``receiver`` gets. Linux turns its receive timestamps on for the first socket
    that asks in a deferred work item, so bytes that arrive right after may come unstamped (one read in ~300 here)."""
    for _ in range(100):
        sender.sendall(b"?")
        _data, ancillary, _flags, _address = receiver.recvmsg(1, 64)
        if kernel_time(ancillary) is not None:
            return
        time.sleep(0.01)
    pytest.fail("the kernel never stamped a read")


def http_chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def serve_first_chunk_with_headers(server: socket.socket, gap_s: float) -> None:
    """One streamed response whose headers and first chunk leave in one segment, the second chunk ``gap_s`` later."""
    connection, _ = server.accept()
    with connection:
        connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        while b"\r\n\r\n" not in connection.recv(4096):
            pass
        event = b'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
        headers = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        connection.sendall(headers + http_chunk(event))
        time.sleep(gap_s)
        connection.sendall(http_chunk(event) + http_chunk(b"data: [DONE]\n\n") + b"0\r\n\r\n")
        connection.recv(1)  # until the client closes


@pytest.mark.skipif(not KERNEL_PLATFORM, reason="SO_TIMESTAMPNS is Linux's")
def test_chunks_read_with_the_headers_get_the_kernel_time_of_that_read():
    """The first chunk comes in the headers' segment and is parsed late: it must still carry its arrival time,
    on the same clock as the chunk after it (else the first chunk is timed after the second, TTFT above e2e)."""
    gap_s = 0.05
    with socket.create_server(("127.0.0.1", 0)) as server:
        serving = threading.Thread(target=serve_first_chunk_with_headers, args=(server, gap_s), daemon=True)
        serving.start()
        pool = TimedClientPool(network_timeout=30, connection_timeout=30)
        client = pool.get_client(f"http://127.0.0.1:{server.getsockname()[1]}/")
        exchange = Exchange("t", 1, None, 2, check_output=False)
        exchange.sent()
        user_send_time = exchange.start_real
        response = client.request("GET", "/v1/chat/completions")
        headers_read = time.perf_counter()
        time.sleep(0.3)  # a busy worker: both chunks wait in the kernel
        use_send_time(response, exchange)
        read_body(response, SSEParser(exchange, CHAT_MARKER, chat_is_output), exchange)
        pool.close()
        serving.join(10)
    assert exchange.chunks == 2
    assert user_send_time < exchange.start_real < user_send_time + 0.1  # the kernel's time the request left
    assert exchange.start < exchange.first <= headers_read  # the header read's arrival, not when parsing ran
    assert exchange.last - exchange.first >= gap_s * 0.9  # both on the kernel's clock: the server's gap
