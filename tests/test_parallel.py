"""Fixed question sets at parallelism 1, 4, 16 (vllm_stress/scenarios/studies/parallel.py): datasets, the simulator's answer model and a
run against the simulator whose report shows the speedup and the answers that changed."""

from __future__ import annotations

import json

import pytest
import requests

from benchmarks.harness import read_rows
from tests.helpers import REPO
from vllm_stress.core.grading import grade
from vllm_stress.core.questions import DatasetError, load_questions, prompt
from vllm_stress.scenarios.data import make_synthetic
from vllm_stress.simulator.model.answers import AnswerModel
from vllm_stress.simulator.model.profiles import load_profile

DATA = REPO / "scenarios" / "data"
MC, MATH = DATA / "synthetic-mc.jsonl", DATA / "synthetic-math.jsonl"
MC_COUNT, MATH_COUNT = 48, 16
TRACE_SAMPLES = (("mooncake", "jsonl"), ("azure", "csv"), ("burstgpt", "csv"))


def test_bundled_sets_are_what_the_script_writes(tmp_path):
    make_synthetic.main(tmp_path)
    for path in (MC, MATH, *(DATA / f"{trace}-sample.{ext}" for trace, ext in TRACE_SAMPLES)):
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), f"rerun scenarios/data/{path.name}'s script"


def test_loader_reads_mmlu_and_gsm8k_shapes(tmp_path):
    mmlu = tmp_path / "mmlu.jsonl"
    mmlu.write_text(
        '{"question": "Q1", "choices": ["a", "b", "c", "d"], "answer": 2, "subject": "x"}\n\n'
        '{"id": "q-2", "question": "Q2", "choices": ["a", "b", "c", "d"], "answer": "b"}\n'
    )
    assert [(q.id, q.kind, q.gold, q.subject) for q in load_questions(mmlu)] == [
        ("1", "mc", "C", "x"),
        ("q-2", "mc", "B", ""),
    ]
    gsm8k = tmp_path / "gsm8k.jsonl"
    gsm8k.write_text('{"question": "How many?", "answer": "3 * 400 = 1200 <<3*400=1200>>\\n#### 1,200"}\n' * 3)
    questions = load_questions(gsm8k, limit=2)
    assert [(q.kind, q.gold) for q in questions] == [("math", "1200")] * 2
    assert prompt(questions[0]).endswith("#### <number>")


@pytest.mark.parametrize(
    "lines,message",
    [
        ('{"question": "Q", "choices": ["a", "b"], "answer": 0}\n', ":1: not an MMLU or GSM8K line"),
        ('{"question": "Q", "answer": "seven"}\n', ":1: not an MMLU or GSM8K line"),
        (
            '{"question": "Q", "answer": "#### 7"}\n{"question": "Q", "choices": ["a", "b", "c", "d"], "answer": 0}\n',
            "mixes multiple-choice and math",
        ),
        ("", "no questions"),
    ],
)
def test_loader_rejects_bad_files(tmp_path, lines, message):
    path = tmp_path / "bad.jsonl"
    path.write_text(lines)
    with pytest.raises(DatasetError, match=message):
        load_questions(path)


def model(**overrides) -> AnswerModel:
    return AnswerModel(load_profile("h100-llama-3.1-8b", overrides))


def reply_text(answers: AnswerModel, question, seed: int = 1, others: int = 0) -> str:
    reply = answers.reply([("user", prompt(question))], seed, others)
    return reply.text(0, 0, reply.length - 1).decode()


@pytest.mark.parametrize("path", [MC, MATH])
def test_answer_model_knows_the_synthetic_answers(path):
    questions = load_questions(path)
    assert all(grade(q.kind, reply_text(model(answer_accuracy=1.0), q), q.gold)[1] for q in questions)
    assert not any(grade(q.kind, reply_text(model(answer_accuracy=0.0), q), q.gold)[1] for q in questions)
    correct = sum(grade(q.kind, reply_text(model(), q), q.gold)[1] for q in questions)
    assert 0.7 < correct / len(questions) < 0.9  # the profile's 0.8


def test_answers_repeat_alone_and_flip_under_load():
    questions = load_questions(MC)
    answers = model(answer_flip_rate=0.02)
    alone = [reply_text(answers, q) for q in questions]
    assert alone == [reply_text(answers, q) for q in questions]
    assert [reply_text(model(answer_flip_rate=0.0), q, others=100) for q in questions] == alone
    flipped = sum(a != reply_text(answers, q, others=15) for a, q in zip(alone, questions, strict=True))
    assert 0.15 < flipped / len(questions) < 0.45  # 15 others x 0.02 = 0.3
    assert [reply_text(answers, q, seed=2) for q in questions] != alone


def test_unknown_and_plain_prompts():
    answers = model()
    assert answers.reply([("user", "Tell me a story about a river")], 0, 0) is None
    planets = "Which planet is largest?\nA) Mars\nB) Jupiter\nC) Venus\nD) Earth\nAnswer with the letter."
    unknown = answers.reply([("user", planets)], 0, 0)
    assert grade("mc", unknown.text(0, 0, unknown.length - 1).decode(), "B")[0] in "ABCD"
    assert answers.reply([("user", planets), ("assistant", "B"), ("user", "Thanks, and why?")], 0, 0) is None
    with pytest.raises(ValueError, match="answer_accuracy"):
        model(answer_accuracy=1.5)


def test_simulator_streams_the_same_answer(simulator):
    sim = simulator("--profile", "cpu-tiny", "--time-scale", "10")
    question = load_questions(MATH, limit=1)[0]
    body = {"model": sim.model, "messages": [{"role": "user", "content": prompt(question)}], "seed": 7}
    plain = requests.post(sim.url + "/v1/chat/completions", json=body, timeout=30).json()
    text = plain["choices"][0]["message"]["content"]
    assert grade("math", text, question.gold)[0] is not None and plain["choices"][0]["finish_reason"] == "stop"
    with requests.post(sim.url + "/v1/chat/completions", json=body | {"stream": True}, stream=True, timeout=30) as r:
        chunks = [json.loads(line[6:]) for line in r.iter_lines(decode_unicode=True) if line.startswith("data: {")]
    assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"]) == text
    forced = requests.post(
        sim.url + "/v1/chat/completions", json=body | {"max_tokens": 8, "ignore_eos": True}, timeout=30
    ).json()
    assert grade("math", forced["choices"][0]["message"]["content"], question.gold)[0] is None  # pseudo-words


@pytest.fixture(scope="module")
def run(scenarios, tmp_path_factory):
    """One run of the CLI: 48 multiple-choice and 16 math questions at P = 1, 4, 16 on the default profile."""
    folder = tmp_path_factory.mktemp("parallel")
    math = folder / "math16.jsonl"
    math.write_text("".join(MATH.read_text().splitlines(keepends=True)[:MATH_COUNT]))
    out = folder / "out"
    args = [
        "parallel",
        "--dataset",
        str(MC),
        "--dataset",
        str(math),
        "--limit",
        str(MC_COUNT),
        "--parallel",
        "1,4,16",
        "--out",
        str(out),
        "--simulator-arg=--answer-flip-rate=0.01",
        "--simulator-arg=--set=output_len_mean=48",
    ]
    assert scenarios(args) == 0
    return out


def test_answers_csv_rows_are_graded(run):
    rows = read_rows(run / "answers.csv")
    assert len(rows) == 3 * (MC_COUNT + MATH_COUNT)
    for row in rows:
        kind = "mc" if row["dataset"] == "synthetic-mc" else "math"
        assert row["error"] == "" and row["finish_reason"] == "stop", row
        assert int(row["prompt_tokens"]) > 0 and int(row["completion_tokens"]) > 0, row
        extracted, correct = grade(kind, row["answer_text"], row["gold"])
        assert (row["extracted"], row["correct"]) == (extracted, str(correct)), row


def test_speedup_grows_with_parallelism(run):
    summary = json.loads((run / "summary.json").read_text())
    assert summary["simulated"] and summary["model"] == "meta-llama/Llama-3.1-8B-Instruct"
    for name, dataset in summary["datasets"].items():
        levels = dataset["levels"]
        assert [level["parallel"] for level in levels] == [1, 4, 16]
        speedups = [level["speedup"] for level in levels]
        assert speedups[0] == 1.0 and 1.5 < speedups[1] < speedups[2], (name, speedups)
        assert all(level["errors"] == 0 and level["unanswered"] == 0 for level in levels)
        assert 0.5 < levels[0]["accuracy"] < 1.0


def test_agreement_matrix_and_changed_answers_in_report(run):
    summary = json.loads((run / "summary.json").read_text())
    report = (run / "report.md").read_text()
    assert "## synthetic-mc (48 questions, multiple choice)" in report and "not any model's accuracy" in report
    changed_total = 0
    for dataset in summary["datasets"].values():
        result, n = dataset["agreement"], dataset["questions"]
        matrix = result["matrix"]
        assert [matrix[i][i] for i in range(3)] == [n] * 3
        assert matrix == [list(row) for row in zip(*matrix, strict=True)]
        assert n - min(map(min, matrix)) <= len(result["changed"]) <= n
        for changed in result["changed"]:
            assert f"| {changed['question_id']} | {changed['gold']} |" in report
        changed_total += len(result["changed"])
    assert changed_total > 0  # 0.01 x up to 15 others
    assert (run / "speedup.png").read_bytes().startswith(b"\x89PNG")
    assert "data:image/png;base64," in (run / "report.html").read_text()
