"""The SSE reader (vllm_stress/client/stream.py ``SSEParser``) against the event-stream rules of the WHATWG HTML
standard (section 9.2.6): LF, CR and CRLF line ends, fields, comments and dispatch, however the bytes are cut; and
a CRLF-framed simulator stream timed like an LF one."""

from __future__ import annotations

import bisect
import statistics

import pytest

from benchmarks.harness import read_rows
from tests.helpers import NO_CANARIES
from vllm_stress.client.exchange import Exchange
from vllm_stress.client.sse import SSEParser
from vllm_stress.client.stream import KERNEL_ENABLED
from vllm_stress.core.failures import StreamError
from vllm_stress.simulator.api.requestlog import read_request_log

MARKER = b'"choices":[{"index":0,"text":"'  # the completions user's output marker (users/completions.py)
ENDINGS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}


def output(text: str) -> bytes:
    """An output chunk in vLLM's completions byte layout: the reader counts it without parsing its JSON."""
    return b'{"id":"c","choices":[{"index":0,"text":"%s","logprobs":null,"finish_reason":null}]}' % text.encode()


# (lines of one event, written with LF ends): every rule of the standard the reader must follow, in one body
EVENTS = [
    [b": a comment, then the first output chunk", b"data: " + output("a")],
    [b"event: message", b"id: 7", b"retry: 3000", b"data: " + output("b")],  # fields without a use here
    [b"data:" + output("c")],  # no space after the colon
    # a JSON object over three data lines (joined by LF: still one object), the last a field without a colon
    [b'data: {"id":"c","choices":[{"index":0,"text":"d",', b'data:  "finish_reason":"length"}]}', b"data"],
    [b'data: {"id":"c","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":4,"total_tokens":11}}'],
    [b"data:[DONE]"],
]


def body(ending: bytes, events: list[list[bytes]] = EVENTS) -> bytes:
    return b"".join(b"".join(line + ending for line in lines) + ending for lines in events)


def parse(data: bytes, cuts: list[int]) -> Exchange:
    """Feed ``data`` cut at the ``cuts`` offsets, the n-th piece at time n."""
    exchange = Exchange("t", 1, None, 4, check_output=False)
    exchange.start = 0.0
    parser = SSEParser(exchange, MARKER, lambda choice: "text" in choice)
    edges = [0, *cuts, len(data)]
    for n, (a, b) in enumerate(zip(edges, edges[1:], strict=False)):
        parser.feed(data[a:b], float(n + 1))
    parser.finish()
    return exchange


def event_ends(ending: bytes) -> list[int]:
    """The offset after the byte that completes each event: the first byte of the line end that ends its empty line
    (a CR ends a line whether or not an LF follows)."""
    ends, offset = [], 0
    for lines in EVENTS:
        offset += sum(len(line) + len(ending) for line in lines)
        ends.append(offset + 1)
        offset += len(ending)
    return ends


@pytest.mark.parametrize("name", list(ENDINGS))
def test_each_line_end_gives_the_same_events_timed_by_the_read_that_completed_them_at_every_cut(name):
    ending = ENDINGS[name]
    data = body(ending)
    ends = event_ends(ending)
    outputs = ends[:4]  # the four events carrying text: a, b, c, d
    for cut in range(1, len(data)):
        exchange = parse(data, [cut])
        assert (exchange.chunks, exchange.completion_tokens, exchange.prompt_tokens, exchange.finish_reason) == (
            4,
            4,
            7,
            "length",
        ), cut
        times = [1.0 if cut >= end else 2.0 for end in outputs]
        assert exchange.first == times[0] and exchange.gaps == [b - a for a, b in zip(times, times[1:], strict=False)]


@pytest.mark.parametrize("name", list(ENDINGS))
def test_one_byte_a_read_times_each_event_by_its_own_last_byte(name):
    ending = ENDINGS[name]
    data = body(ending)
    exchange = parse(data, list(range(1, len(data))))  # byte n arrives at time n + 1
    times = [float(end) for end in event_ends(ending)[:4]]
    assert exchange.chunks == 4 and exchange.first == times[0]
    assert exchange.gaps == [b - a for a, b in zip(times, times[1:], strict=False)]


def test_a_cr_ending_one_read_and_an_lf_opening_the_next_are_one_line_end():
    """Were the LF an empty line of its own, the first half of the object would be dispatched alone (bad JSON)."""
    half = b'data: {"id":"c","choices":[{"index":0,"text":"x",\r'
    rest = b'\ndata: "finish_reason":"length"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    exchange = parse(half + rest, [len(half)])
    assert (exchange.chunks, exchange.finish_reason, exchange.first) == (1, "length", 2.0)
    with_empty_read = parse(half + rest, [len(half), len(half)])  # an empty read between the CR and the LF
    assert (with_empty_read.chunks, with_empty_read.first) == (1, 3.0)


def test_an_event_without_its_empty_line_at_the_end_of_the_body_still_counts():
    exchange = parse(b"data: " + output("a") + b"\r\n\r\ndata: [DONE]", [])
    assert exchange.chunks == 1


@pytest.mark.parametrize(
    "data, error",
    [
        (b"data: " + output("a") + b"\r\n\r\n", "StreamTruncated"),  # no [DONE]
        (b"data: [DONE]\r\r", "NoOutput"),
        (b"oops\r\rdata: [DONE]\r\r", "MalformedSSE"),  # a field the standard ignores: no such server sends it
        (b'{"choices": []}\r\n\r\n', "MalformedSSE"),  # a JSON body without "data:"
        (b'data: {"error":{"type":"Busy"}}\r\n\r\n', "StreamError Busy"),
    ],
)
def test_broken_streams_fail_with_their_class_with_any_line_end(data, error):
    with pytest.raises(StreamError) as caught:
        parse(data, [])
    assert caught.value.name == error


def test_a_long_line_left_open_read_after_read_is_kept_whole():
    """64 KiB reads of one 8 MiB event: its pieces are joined once, when its line ends."""
    piece = b"x" * (64 * 1024)
    text = b"".join([piece] * 128)
    data = b'data: {"choices":[{"index":0,"text":"' + text + b'"}]}\r\n\r\ndata: [DONE]\r\n\r\n'
    cuts = list(range(64 * 1024, len(data), 64 * 1024))
    exchange = Exchange("t", 1, None, 4, check_output=False)
    exchange.start = 0.0
    seen: list[int] = []
    parser = SSEParser(exchange, b"\0", lambda choice: bool(seen.append(len(choice["text"]))) or True)
    edges = [0, *cuts, len(data)]
    for n, (a, b) in enumerate(zip(edges, edges[1:], strict=False)):
        parser.feed(data[a:b], float(n + 1))
    parser.finish()
    completing = data.index(b"\r\n\r\n") + 2  # the CR that ends its empty line
    assert seen == [len(text)] and exchange.first == float(bisect.bisect_right(edges, completing))


def chat_run(simulator, run_locust, tmp_path, ending: str) -> list[float]:
    """The chat user against a simulator framing its events with ``ending``: per request, the client's first-token
    time less the time the server stamped its first output write (the request log, on the same host clock)."""
    log = tmp_path / f"{ending}.jsonl"
    sim = simulator(
        "--profile", "cpu-tiny", "--set", "t_fixed=0.02", "--sse-line-ending", ending, "--request-log", str(log)
    )
    out = tmp_path / ending
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "--headless",
        *NO_CANARIES,
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "4s",
        "--input-tokens",
        "16",
        "--output-tokens",
        "32",
        "--results-dir",
        str(out),
        "--only-summary",
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sim.stop()  # flushes the log
    records = read_request_log(str(log))
    rows = [row for row in read_rows(out / "requests.csv") if row["ok"] == "1"]
    assert len(rows) >= 4 and all(int(row["chunks"]) == 32 for row in rows)
    delays = []
    for row in rows:
        record = records[row["request_id"]]
        first = float(row["start_time"]) + float(row["ttft_s"])
        # the first token was timed before the server wrote its last: not held until the end of the body
        assert first < record["last"]
        delays.append(first - record["first"])
    return delays


@pytest.mark.skipif(not KERNEL_ENABLED, reason="the client's first-token times are the kernel's receive times")
def test_a_crlf_or_cr_framed_stream_is_timed_like_an_lf_one(simulator, run_locust, tmp_path):
    """32 tokens 20 ms apart: a reader that waited for LF LF would time the first token at the end of the body,
    ~0.6 s after the server's first write; the median delay between that write and the client's kernel receive
    time is printed per framing."""
    medians = {ending: statistics.median(chat_run(simulator, run_locust, tmp_path, ending)) for ending in ENDINGS}
    print({ending: f"{median * 1e3:.3f} ms" for ending, median in medians.items()})
    assert all(0 < median < 0.2 for median in medians.values()), medians  # the client after the write, not 0.6 s
