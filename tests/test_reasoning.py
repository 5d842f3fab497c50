"""A reasoning model's stream (issue #28): its thinking counts as output for TTFT, the first answer token gives TTFA,
and a row that reasoned and never answered says so; the simulator's reasoning mode measured end to end."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

from benchmarks.harness import read_rows
from tests.helpers import NO_CANARIES, analyse
from tests.test_stream import CHAT_MARKER, parse
from vllm_stress.client.exchange import is_output_delta
from vllm_stress.client.prompts import Workload
from vllm_stress.core import schema
from vllm_stress.simulator.api.server import thinking
from vllm_stress.users.base import sampling

STEADY_SIM = ["--profile", "cpu-tiny", "--set", "t_fixed=0.02", "--set", "jitter=0"]  # every decode step 20 ms
OUTPUT_TOKENS = 25
RUN = ["-u", "1", "-r", "1", "-t", "4s", "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]
RUN += ["--input-tokens", "32", "--output-tokens", str(OUTPUT_TOKENS)]


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


def reasoning_run(
    run_locust, simulator, out: Path, reasoning: list[str], *extra: str, locustfile: str = "chat"
) -> list[dict]:
    """One user of ``locustfile`` against a simulator serving a reasoning model (``reasoning``: its flags) for 4 s:
    the run's successful rows, the run folder in ``out``."""
    sim = simulator(*STEADY_SIM, *reasoning)
    proc = run_locust("-f", f"locustfiles/{locustfile}.py", *RUN, "-H", sim.url, "--results-dir", str(out), *extra)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [row for row in read_rows(out / schema.REQUESTS_FILE) if row["ok"] == "1"]
    assert len(rows) >= 3
    return rows


@pytest.mark.parametrize("locustfile", ["chat", "sdk"])
def test_the_answer_comes_reasoning_tokens_steps_after_the_first_token(run_locust, simulator, tmp_path, locustfile):
    """R reasoning tokens then A answer tokens, one token per 20 ms step: the answer's first token comes R steps
    after the first token (TTFT still counts the thinking), so ttfa - ttft = R x TPOT. Compared on the rows' medians:
    a loaded machine stretches some of the server's steps, and a row whose late steps were stretched has a TPOT
    unlike its first R steps (the SDK user's times are its own reads, without the kernel clock, too)."""
    reasoning, answer = 15, OUTPUT_TOKENS - 15
    flags = ["--reasoning-tokens", str(reasoning)]
    rows = reasoning_run(run_locust, simulator, tmp_path / "run", flags, locustfile=locustfile)
    for row in rows:
        assert (int(row["reasoning_tokens"]), int(row["completion_tokens"]), int(row["chunks"])) == (
            reasoning,
            reasoning + answer,
            reasoning + answer,
        )
    waited = statistics.median(float(row["ttfa_s"]) - float(row["ttft_s"]) for row in rows)
    assert waited == pytest.approx(reasoning * statistics.median(float(row["tpot_s"]) for row in rows), rel=0.05)
    level = analyse(tmp_path / "run", tmp_path / "report")["levels"][0]
    assert level["reasoning_share"] == pytest.approx(reasoning / OUTPUT_TOKENS)
    assert level["answer_tokens_per_s"] == pytest.approx(level["output_tokens_per_s"] * answer / OUTPUT_TOKENS)
    assert level["cut_before_answer"] == 0 and level["ttfa_p50_s"] > level["ttft_p50_s"]


def test_a_model_that_thinks_through_its_whole_budget_is_cut_before_answering(run_locust, simulator, tmp_path):
    """R >= --output-tokens (older field name): every row succeeds without an answer, and the report counts each."""
    flags = ["--reasoning-tokens", str(OUTPUT_TOKENS + 5), "--reasoning-field", "reasoning_content"]
    rows = reasoning_run(run_locust, simulator, tmp_path / "run", flags)
    assert {(row["ttfa_s"], row["reasoning_tokens"], row["finish_reason"]) for row in rows} == {
        ("", str(OUTPUT_TOKENS), "length")
    }
    level = analyse(tmp_path / "run", tmp_path / "report")["levels"][0]
    assert level["cut_before_answer"] == level["requests"] > 0 and level["reasoning_share"] == 1.0
    assert level["answer_tokens_per_s"] == 0
    assert "Cut before answer" in (tmp_path / "report" / schema.REPORT_MD).read_text()


def test_a_reasoning_budget_makes_output_tokens_bound_the_answer(run_locust, simulator, tmp_path):
    """The same model thinking past --output-tokens, given --reasoning-budget: max_tokens = output + budget, so every
    row thinks its R tokens and still answers with the rest (at least --output-tokens), none cut before answering."""
    reasoning, budget = OUTPUT_TOKENS + 5, OUTPUT_TOKENS + 10
    flags = ["--reasoning-tokens", str(reasoning)]
    budgeted = ["--reasoning-budget", str(budget), "-u", "2", "-r", "2"]  # 1.2 s answers: two users make 3 in 4 s
    rows = reasoning_run(run_locust, simulator, tmp_path / "run", flags, *budgeted)
    assert {(row["target_completion_tokens"], row["completion_tokens"], row["reasoning_tokens"]) for row in rows} == {
        (str(OUTPUT_TOKENS + budget), str(OUTPUT_TOKENS + budget), str(reasoning))
    }
    assert all(row["ttfa_s"] != "" and row["count_mismatch"] == "0" for row in rows)
    assert analyse(tmp_path / "run", tmp_path / "report")["levels"][0]["cut_before_answer"] == 0


def test_the_request_asks_for_the_answer_the_budget_and_the_effort():
    workload = Workload(32, OUTPUT_TOKENS, words=["a"], reasoning_budget=100)
    spec = workload.next_request()
    assert spec.max_tokens == OUTPUT_TOKENS + 100
    user = SimpleNamespace(
        target=SimpleNamespace(model="m"),
        stream=True,
        ignore_eos=True,
        temperature=None,
        chat=True,
        thinking=True,
        reasoning_effort="low",
        traffic_class=None,
    )
    fields = sampling(user, spec)
    assert (fields["max_tokens"], fields["min_tokens"], fields["reasoning_effort"]) == (125, 125, "low")
    assert "reasoning_effort" not in sampling(SimpleNamespace(**vars(user) | {"reasoning_effort": None}), spec)


@pytest.mark.parametrize("locustfile", ["chat", "sdk"])
def test_thinking_off_asks_the_model_not_to_reason(run_locust, simulator, tmp_path, locustfile):
    """--thinking off sends chat_template_kwargs enable_thinking=false and thinking=false: no reasoning, the answer at
    the first token."""
    flags = ["--reasoning-tokens", "15"]
    rows = reasoning_run(run_locust, simulator, tmp_path / "run", flags, "--thinking", "off", locustfile=locustfile)
    assert {row["reasoning_tokens"] for row in rows} == {""}
    assert all(row["ttfa_s"] == row["ttft_s"] != "" for row in rows)


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


VLLM_REASONING_STREAM = Path(__file__).parent / "fixtures" / "vllm_reasoning_stream.json"


def test_vllms_reasoning_stream_is_read_by_the_same_reader():
    """The stream vLLM's chat serving writes with a reasoning parser (the fixture's note): TTFT at the first thinking
    chunk, TTFA at the first answer chunk, the reasoning tokens from usage, and the same count from the stream alone
    (vLLM sends no chunk for the <think> tags, so with one token per chunk the count is exact)."""
    fixture = json.loads(VLLM_REASONING_STREAM.read_text())
    body = b"".join(b"data: %s\n\n" % line.encode() for line in fixture["data"])
    row = row_of(body)
    first_reasoning = body.index(b"\n\n", body.index(b'"delta":{"reasoning"')) + 2
    first_answer = body.index(b"\n\n", body.index(b'"delta":{"content":"Hello"')) + 2
    assert (row["ttft_s"], row["ttfa_s"]) == (first_reasoning, first_answer)
    reasoning, answers = fixture["reasoning_tokens"], fixture["answer_chunks"]
    assert (row["reasoning_tokens"], row["chunks"], row["finish_reason"]) == (reasoning, reasoning + answers, "length")
    assert row["completion_tokens"] == reasoning + answers + 2  # the two tags are tokens without a chunk
    without_details = body.replace(b',"completion_tokens_details":{"reasoning_tokens":4}', b"")
    assert without_details != body and row_of(without_details)["reasoning_tokens"] == reasoning


def test_the_simulator_honours_either_templates_thinking_switch():
    assert thinking({}) and thinking({"chat_template_kwargs": {"enable_thinking": True, "thinking": True}})
    assert not thinking({"chat_template_kwargs": {"enable_thinking": False}})  # Qwen3's
    assert not thinking({"chat_template_kwargs": {"thinking": False}})  # DeepSeek-V3.1+'s, Kimi-K2's
