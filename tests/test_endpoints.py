"""The Responses and Messages users against the simulator's /v1/responses and /v1/messages, through the real locust
CLI: every row is a request the server logged, with the server's token counts and its TTFT; their parsers on vLLM's
own bytes, and the simulator's events against vLLM's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import requests

from tests.helpers import check_first_token_times, logged_run
from vllm_stress.client.events import MessagesParser, ResponsesParser
from vllm_stress.client.exchange import Exchange

BOTH = "locustfiles/responses.py,locustfiles/messages.py"
PATHS = {"responses": "/v1/responses", "messages": "/v1/messages"}


def run_both(run_locust, simulator, tmp_path, *args: str) -> tuple[list[dict], dict[str, dict]]:
    """One user of each class for 4 s against a simulator with a request log: (the rows, the log by request id)."""
    rows, records = logged_run(run_locust, simulator, tmp_path, "-f", BOTH, *args)
    for row in rows:
        assert row["endpoint"] == PATHS[row["name"]], row
        assert row["request_id"] not in records or records[row["request_id"]]["path"] == row["endpoint"], row
    return rows, records


def check_counts(row: dict, record: dict) -> None:
    """A finished row's counts are the server's usage: the prompt as built, the output as the engine made it."""
    assert (row["ok"], row["error"], row["count_mismatch"]) == ("1", "", "0"), row
    assert int(row["prompt_tokens"]) == int(row["target_prompt_tokens"]) == record["prompt_tokens"], (row, record)
    assert int(row["completion_tokens"]) == record["completion_tokens"], (row, record)


def test_streamed_rows_are_the_servers_and_timed_like_chat(run_locust, simulator, tmp_path):
    """16 output tokens each: Responses forces them (ignore_eos), Messages cannot (vLLM's Messages API drops
    ignore_eos), so its answers may stop earlier; TPOT is vLLM's benchmark's, over the usage's tokens."""
    rows, records = run_both(run_locust, simulator, tmp_path, "--input-tokens", "64", "--output-tokens", "16")
    done = [r for r in rows if r["error"] != "Aborted"]
    assert {r["name"] for r in done} == {"responses", "messages"}
    for row in done:
        check_counts(row, records[row["request_id"]])
        completion = int(row["completion_tokens"])
        assert row["finish_reason"] == ("length" if completion == 16 else "stop"), row
        if row["name"] == "responses":  # one delta event per token (the simulator's tokens all have text)
            assert (completion, int(row["chunks"])) == (16, 16), row
        if completion > 1:
            gaps = float(row["e2e_s"]) - float(row["ttft_s"])
            assert float(row["tpot_s"]) * (completion - 1) == pytest.approx(gaps, abs=1e-5), row


def test_ttft_is_the_servers_first_write(run_locust, simulator, tmp_path):
    """As chat's (tests/test_users.py): the client's send is the server's kernel arrival within 2 ms, and its first
    token the server's first output write (tests.helpers.check_first_token_times). One output token: that write is
    the answer's only one with output."""
    rows, records = run_both(run_locust, simulator, tmp_path, "--input-tokens", "500", "--output-tokens", "1")
    done = [r for r in rows if r["ok"] == "1"]  # a Messages answer whose only token is EOS has no output: NoOutput
    assert {r["name"] for r in done} == {"responses", "messages"}
    for row in done:
        check_counts(row, records[row["request_id"]])
    check_first_token_times(done, records)


def test_whole_answers(run_locust, simulator, tmp_path):
    """Not streamed: the counts and the finish reason come from the whole body's usage."""
    rows, records = run_both(
        run_locust, simulator, tmp_path, "--input-tokens", "64", "--output-tokens", "16", "--no-stream"
    )
    done = [r for r in rows if r["error"] != "Aborted"]
    assert {r["name"] for r in done} == {"responses", "messages"}
    for row in done:
        check_counts(row, records[row["request_id"]])
        assert row["ttft_s"] == "" and row["chunks"] == "0", row
        assert row["finish_reason"] == ("length" if row["completion_tokens"] == "16" else "stop"), row


VLLM_STREAMS = json.loads((Path(__file__).parent / "fixtures" / "vllm_typed_streams.json").read_text())
NESTED = ("response", "message", "item", "part", "delta", "usage", "content_block")  # the objects a shape looks into


def event_shapes(body: str) -> list[tuple]:
    """Each event's type (its event: line and its data's), its keys and those of the objects it holds; repeats of
    one shape in a row count once (vLLM sends no event for a token without text)."""
    shapes: list[tuple] = []
    for block in body.strip().split("\n\n"):
        kind_line, data_line = block.split("\n")
        data = json.loads(data_line.removeprefix("data: "))
        nested = {key: sorted(data[key]) for key in NESTED if isinstance(data.get(key), dict)}
        usage = (data.get("response") or data.get("message") or {}).get("usage")
        shape = (kind_line.removeprefix("event: "), data["type"], sorted(data), nested, sorted(usage or {}))
        if not shapes or shapes[-1] != shape:
            shapes.append(shape)
    return shapes


@pytest.mark.parametrize("api,parser", [("responses", ResponsesParser), ("messages", MessagesParser)])
def test_vllms_own_stream_is_read(api, parser):
    """vLLM 0.32's bytes (tests/fixtures/vllm_typed_streams.json): one output chunk per delta event, the usage's
    counts, the finish reason in chat's words, a complete stream."""
    exchange = Exchange(api, 1, 25, 3, check_output=True)
    reader = parser(exchange)
    reader.feed(VLLM_STREAMS[api]["body"].encode(), 1.0)
    reader.finish()
    chunks = {"responses": 2, "messages": 1}[api]
    assert (exchange.prompt_tokens, exchange.completion_tokens, exchange.chunks) == (25, 3, chunks)
    assert exchange.finish_reason == "length" and exchange.cached_tokens == 0 and not exchange.count_mismatch()


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_simulator_streams_vllms_events(simulator, api):
    """The simulator's stream of the same request has vLLM's events in vLLM's order with vLLM's keys."""
    sim = simulator("--profile", "cpu-tiny", "--enable-prompt-tokens-details")
    request = VLLM_STREAMS[api]["request"] | {"model": sim.model}
    answer = requests.post(f"{sim.url}/v1/{api}", json=request, timeout=30)
    assert answer.headers["content-type"].startswith("text/event-stream")
    assert event_shapes(answer.text) == event_shapes(VLLM_STREAMS[api]["body"])
