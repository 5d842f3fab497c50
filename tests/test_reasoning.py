"""A reasoning model's stream (issue #28): its thinking counts as output for TTFT, the first answer token gives TTFA,
and a row that reasoned and never answered says so; the simulator's reasoning mode measured end to end."""

from __future__ import annotations

import json

import pytest

from tests.test_stream import CHAT_MARKER, parse
from vllm_stress.client.exchange import is_output_delta
from vllm_stress.core import schema


def chat_is_output(choice: dict) -> bool:
    return is_output_delta(choice.get("delta") or {})


def reasoning_body(field: str, reasoning: int, answer: int, usage: dict) -> bytes:
    """A captured-shape chat stream: the role chunk, ``reasoning`` thinking chunks in ``field``, ``answer`` content
    chunks (the last one ends by length), the usage chunk and [DONE]."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    deltas = [{"role": "assistant", "content": ""}]
    deltas += [{field: "think "}] * reasoning + [{"content": "word "}] * answer
    events = []
    for n, delta in enumerate(deltas, start=1):
        reason = "length" if n == len(deltas) else None
        events.append(head | {"choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": reason}]})
    events.append(head | {"choices": [], "usage": usage})
    return b"".join(b"data: %s\n\n" % json.dumps(event).encode() for event in events) + b"data: [DONE]\n\n"


def row_of(body: bytes) -> dict:
    """The requests.csv row of ``body`` fed one byte at a time, byte n arriving at time n."""
    exchange = parse(body, CHAT_MARKER, chat_is_output, list(range(1, len(body))))
    exchange.finish()
    return dict(zip(schema.REQUEST_COLUMNS, exchange.row("local"), strict=True))


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_chunks_are_output_and_the_first_content_chunk_is_the_answer(field):
    usage = {"prompt_tokens": 7, "completion_tokens": 5, "total_tokens": 12}
    body = reasoning_body(field, 3, 2, usage)
    row = row_of(body)
    first_reasoning = body.index(b"\n\n", body.index(field.encode())) + 2  # the byte that completes that event
    first_answer = body.index(b"\n\n", body.index(b'"content": "word')) + 2
    assert (row["ttft_s"], row["ttfa_s"]) == (first_reasoning, first_answer)
    assert (row["chunks"], row["reasoning_tokens"], row["completion_tokens"]) == (5, 3, 5)  # counted from the stream


def test_the_servers_reasoning_count_wins_and_a_stream_cut_while_thinking_has_no_answer():
    usage = {"prompt_tokens": 7, "completion_tokens": 4, "completion_tokens_details": {"reasoning_tokens": 4}}
    row = row_of(reasoning_body("reasoning", 4, 0, usage))
    assert (row["ok"], row["finish_reason"], row["reasoning_tokens"], row["ttfa_s"]) == (1, "length", 4, "")
    assert row["ttft_s"] != ""


def test_a_stream_without_reasoning_answers_at_its_first_token():
    row = row_of(reasoning_body("reasoning", 0, 3, {"prompt_tokens": 7, "completion_tokens": 3}))
    assert (row["ttfa_s"], row["reasoning_tokens"]) == (row["ttft_s"], "")
