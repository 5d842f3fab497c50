"""The pooling APIs (embeddings, rerank, score): the client's request bodies and answer checks on the simulator's
bodies, the engine's prefill-only sequence, and the three users against the simulator through the real locust CLI:
every row a request the server logged with its inputs and prompt tokens, and the report's table from those rows."""

from __future__ import annotations

import argparse
import base64
import struct

import pytest

from tests.helpers import NO_CANARIES, analyse, scrape
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.levels import level_windows
from vllm_stress.client.exchange import Exchange
from vllm_stress.client.features.pooling import at_least_one
from vllm_stress.client.pooling import (
    INCOMPLETE,
    embeddings_body,
    read_embeddings,
    read_rerank,
    read_score,
    rerank_body,
    score_body,
)
from vllm_stress.core.csvrows import read_rows
from vllm_stress.core.failures import StreamError
from vllm_stress.core.metrics import in_window
from vllm_stress.simulator.api import poolingapi
from vllm_stress.simulator.api.requestlog import read_request_log
from vllm_stress.simulator.engine.core import Engine
from vllm_stress.simulator.engine.sequence import Sequence
from vllm_stress.simulator.model.errors import ApiError
from vllm_stress.simulator.model.profiles import load_profile
from vllm_stress.simulator.model.tokenizer import Tokenizer


def exchange(inputs: int, target: int | None) -> Exchange:
    """A pooling request's exchange as the users make it: its inputs, its target prompt tokens, no output."""
    made = Exchange("embeddings", 1, target, 0, check_output=False)
    made.inputs = inputs
    return made


def test_request_bodies_are_vllms():
    """The fields vLLM's EmbeddingRequest, RerankRequest and ScoreRequest take; no model when none is named."""
    assert embeddings_body(["a", "b"], "m", "base64") == {
        "input": ["a", "b"],
        "encoding_format": "base64",
        "model": "m",
    }
    assert rerank_body("q", ["a", "b"], "") == {"query": "q", "documents": ["a", "b"]}
    assert score_body("q", ["a"], "m") == {"text_1": "q", "text_2": ["a"], "model": "m"}


@pytest.mark.parametrize("encoding", ["float", "base64"])
def test_embeddings_usage_is_checked_against_the_batch(encoding):
    """The simulator's answer to 3 inputs: usage.prompt_tokens is the inputs' tokens as /tokenize counts them; a
    target one off is a mismatch, one embedding missing a failure."""
    tokenizer = Tokenizer()
    texts = ["one two three", "four five", "six"]
    prompts = poolingapi.embedding_prompts({"input": texts}, tokenizer)
    tokens = sum(len(tokenizer.encode(text)) for text in texts)
    answer = poolingapi.embeddings_response("m", prompts, encoding)
    if encoding == "base64":  # little-endian float32s, as vLLM encodes them
        vector = struct.unpack(f"<{poolingapi.EMBEDDING_DIMENSIONS}f", base64.b64decode(answer["data"][0]["embedding"]))
        assert sum(x * x for x in vector) == pytest.approx(1.0, rel=1e-4)
    on_target = exchange(3, tokens)
    read_embeddings(answer, on_target)
    assert (on_target.prompt_tokens, on_target.completion_tokens, on_target.finish_reason) == (tokens, 0, "")
    assert on_target.measured
    off_target = exchange(3, tokens + 1)
    read_embeddings(answer, off_target)
    assert off_target.count_mismatch() and not off_target.measured
    answer["data"].pop()
    with pytest.raises(StreamError) as missing:
        read_embeddings(answer, exchange(3, tokens))
    assert missing.value.name == INCOMPLETE


def test_rerank_and_score_answers_hold_every_document():
    """Every document scored, in any order (rerank sorts by relevance); a top_n cut leaves some out: a failure."""
    tokenizer = Tokenizer()
    documents = [f"document {n}" for n in range(5)]
    prompts = [poolingapi.pair_ids(tokenizer, "the query", document) for document in documents]
    rerank = poolingapi.rerank_response("m", documents, prompts, None)
    scores = [result["relevance_score"] for result in rerank["results"]]
    assert scores == sorted(scores, reverse=True)
    read = exchange(5, None)
    read_rerank(rerank, read)
    assert read.prompt_tokens == sum(map(len, prompts)) == rerank["usage"]["prompt_tokens"] and read.measured
    read_score(poolingapi.score_response("m", prompts), scored := exchange(5, None))
    assert scored.prompt_tokens == read.prompt_tokens
    with pytest.raises(StreamError):
        read_rerank(poolingapi.rerank_response("m", documents, prompts, 2), exchange(5, None))
    with pytest.raises(StreamError):
        read_score({"error": {"type": "BadRequestError", "message": "no"}}, exchange(5, None))


def test_a_pooled_sequence_costs_its_prefill_and_no_decode():
    """max_tokens 0: the engine schedules its prompt and nothing after, samples no token and ends it stopped at the
    clock a generating twin gets its first token."""
    pooled, generating = Sequence(300, 0), Sequence(300, 2)
    clocks = []
    for seq in (pooled, generating):
        engine = Engine(load_profile("cpu-tiny", {"jitter": 0.0}))
        engine.add_request(seq)
        steps = []
        while engine.has_work:
            engine.step()
            steps.append(engine.last_num_scheduled_tokens)
        clocks.append(steps)
    assert clocks[0] == [300] and clocks[1] == [300, 1]
    assert (pooled.num_output, pooled.finish_reason) == (0, "stop")
    assert pooled.finished_at == pytest.approx(generating.first_token)


LOCUSTFILES = "locustfiles/embeddings.py,locustfiles/rerank.py,locustfiles/score.py"
PATHS = {"embeddings": "/v1/embeddings", "rerank": "/rerank", "score": "/score"}
INPUTS = {"embeddings": 4, "rerank": 5, "score": 5}


def test_the_three_users_rows_are_the_servers_and_the_report_counts_their_inputs(run_locust, simulator, tmp_path):
    """One user of each for 4 s: every row a logged request to its path with the inputs asked, an embeddings row's
    prompt tokens its target and the server's; the engine counted each input as a request of its own, generating
    nothing; the report's embeddings inputs/s is the measured rows' inputs over the level's window."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--request-log", str(log))
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", LOCUSTFILES, "-H", sim.url, "-u", "3", "-r", "3", "-t", "4s", "--headless", "--only-summary"),
        *("--results-dir", str(out), "--input-tokens", "40", "--embedding-inputs", "4", "--rerank-documents", "5"),
        *NO_CANARIES,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = scrape(sim.url)
    sim.stop()  # flushes the log
    rows = read_rows(out / "requests.csv")
    records = read_request_log(str(log))
    done = [row for row in rows if row["error"] != "Aborted"]
    assert {row["name"] for row in done} == set(PATHS)
    assert {row["request_id"] for row in done} <= set(records) <= {row["request_id"] for row in rows}
    for row in done:
        record = records[row["request_id"]]
        assert (row["ok"], row["count_mismatch"], row["finish_reason"]) == ("1", "0", ""), row
        assert row["endpoint"] == record["path"] == PATHS[row["name"]], (row, record)
        assert int(row["inputs"]) == record["inputs"] == INPUTS[row["name"]], (row, record)
        assert int(row["prompt_tokens"]) == record["prompt_tokens"] and record["completion_tokens"] == 0, row
        assert row["ttft_s"] == "" and row["completion_tokens"] == "0", row
        if row["name"] == "embeddings":
            assert int(row["target_prompt_tokens"]) == int(row["prompt_tokens"]) == 4 * 40, row
    # each input a request of the engine's (vLLM's count too); a request the stop cut may have had some finished
    stopped = sum(record["inputs"] for record in records.values() if record["finish_reason"] == "stop")
    assert (
        stopped
        <= metric(metrics, "vllm:request_success_total", "finished_reason=stop")
        <= sum(record["inputs"] for record in records.values())
    )
    assert metric(metrics, "vllm:generation_tokens_total") == 0
    check_report(out, tmp_path / "report")


def metric(metrics: dict[str, float], name: str, label: str = "") -> float:
    """A sample of the simulator's /metrics by its name and one of its labels."""
    (value,) = [value for key, value in metrics.items() if key.startswith(name + "{") and label in key]
    return value


def check_report(run_folder, report_folder) -> None:
    """The level's embeddings figures from the rows that ended in its window, and the report's three tables."""
    summary = analyse(run_folder, report_folder)
    (level,) = summary["levels"]
    windows, _ = level_windows(load_run(run_folder))
    start, end = windows.iloc[0]["start"], windows.iloc[0]["end"]
    rows = read_rows(run_folder / "requests.csv")
    ended = [
        row
        for row in rows
        if row["name"] == "embeddings" and row["ok"] == "1" and in_window(float(row["end_time"]), start, end)
    ]
    window_s = end - start
    assert level["embeddings_requests_per_s"] == pytest.approx(len(ended) / window_s)
    assert level["embeddings_inputs_per_s"] == pytest.approx(sum(int(row["inputs"]) for row in ended) / window_s)
    assert level["embeddings_input_tokens_per_s"] == pytest.approx(4 * 40 * len(ended) / window_s)
    assert level["rerank_inputs_per_s"] == pytest.approx(5 * level["rerank_requests_per_s"])
    report = (report_folder / "report.md").read_text()
    assert "## Embeddings and rerank:" in report
    assert all(f"### {kind}\n" in report for kind in PATHS)


@pytest.mark.parametrize(
    "body",
    [
        {"input": []},
        {"input": ["text", 3]},
        {"input": "text", "encoding_format": "bytes"},
    ],
)
def test_the_simulator_refuses_bad_inputs(body):
    """An empty input, an input neither text nor token ids, an encoding the simulator does not serve (it serves
    float and base64): 400."""
    with pytest.raises(ApiError) as refused:
        poolingapi.embedding_prompts(body, Tokenizer())
    assert refused.value.status == 400


def test_score_pairs_one_text_against_many_or_pairwise():
    assert poolingapi.score_pairs({"text_1": "q", "text_2": ["a", "b"]}) == [("q", "a"), ("q", "b")]
    assert poolingapi.score_pairs({"text_1": ["p", "q"], "text_2": ["a", "b"]}) == [("p", "a"), ("q", "b")]
    with pytest.raises(ApiError):
        poolingapi.score_pairs({"text_1": ["p", "q"], "text_2": ["a", "b", "c"]})


def test_a_request_carries_at_least_one_input():
    assert at_least_one("3") == 3
    with pytest.raises(argparse.ArgumentTypeError):
        at_least_one("0")
