"""Correctness canaries (issue 44): which requests are canaries, how answers are compared across levels, and the
simulator's answer fault seen end to end (answers changed above a batch of 8) and its absence (agreement 1.0)."""

from __future__ import annotations

import csv
import json

import pytest

from benchmarks.harness import read_rows
from tests.helpers import run_cli, small_run
from vllm_stress.analysis.cli import main as analysis_main
from vllm_stress.analysis.features.canary_answers import canary_levels, changed_line, first_diverging_word
from vllm_stress.client.canary import DEFAULT_CANARY_MIN, Canaries
from vllm_stress.core import schema
from vllm_stress.core.questions import Question


def questions(n: int) -> list[Question]:
    return [Question(f"q{i}", "mc", f"question {i}?", ("a", "b", "c", "d"), "A") for i in range(n)]


def test_the_first_requests_of_each_level_are_canaries_then_the_share():
    canaries = Canaries(questions(3), share=0.1, minimum=2)  # the first 2 questions in turn
    picked = [canaries.next(10) for _ in range(40)]
    ids = [c.id if c else None for c in picked]
    assert ids[:2] == ["q0", "q1"]  # the minimum first
    assert sum(c is not None for c in picked) == 4  # 10 % of 40
    assert [c.id for c in picked if c] == ["q0", "q1", "q0", "q1"]  # the first --canary-min prompts, round again
    assert canaries.next(20).id == "q0"  # a new level asks the same prompts from the first


def answer(users: int, canary: str, text: str, gold: str = "B", ok: str = "1") -> dict[str, str]:
    return {"users": str(users), "canary": canary, "answer": text, "gold": gold, "ok": ok}


def test_agreement_is_with_the_lowest_levels_answer_and_the_first_differing_word_is_named():
    rows = [
        answer(1, "a", "The answer is (B)."),
        answer(1, "b", "The answer is (C)."),
        answer(8, "a", "The answer is (B)."),
        answer(8, "b", "The answer is (C)."),
        answer(16, "a", "The answer is (D)."),
        answer(16, "b", "The answer is (C)."),
    ]
    levels = {level["users"]: level for level in canary_levels(rows)}
    assert [levels[u]["agreement"] for u in (1, 8, 16)] == [1.0, 1.0, 0.5]
    assert levels[16]["differ"] == 1 and levels[16]["failing"] == ["a"] and levels[16]["first_word"] == 4
    assert levels[1]["accuracy"] == 0.5 and levels[16]["accuracy"] == 0.0  # gold B: only (B) is right
    line = changed_line(list(levels.values()))
    assert line == "answers changed under load: 1 of 2 canaries differ at 16 users, first at word 4 (a)"
    assert first_diverging_word("one two", "one two three") == 3  # a cut answer leaves after its last word


def canary_ramp(scenarios, out, *simulator_args: str) -> dict:
    """A ramp of 2 then 16 users against the simulator (no random flips), a third of the requests canaries; the
    summary (its one config's)."""
    code = scenarios(
        [
            "run",
            "--scenario",
            "smoke",
            "--out",
            str(out),
            "--simulator-arg=--answer-flip-rate=0",
            *(f"--simulator-arg={arg}" for arg in simulator_args),
            "--locust-arg=--levels=2,16",
            "--locust-arg=--canary-share=0.3",
            "--locust-arg=--canary-min=5",
        ]
    )
    assert code == 0
    answers = read_rows(out / "run-1" / schema.ANSWERS_FILE)
    requests = {row["request_id"]: row for row in read_rows(out / "run-1" / schema.REQUESTS_FILE)}
    assert answers and all(requests[row["request_id"]]["canary"] == row["canary"] for row in answers)
    assert {row["users"] for row in answers} == {"2", "16"}
    return json.loads((out / "report" / "summary.json").read_text())


def test_an_answer_fault_above_batch_8_is_named_in_the_report(scenarios, tmp_path):
    summary = canary_ramp(scenarios, tmp_path / "fault", "--answer-fault-batch=8")
    levels = {level["users"]: level for level in summary["canaries"]}
    assert levels[2]["agreement"] == 1.0 and levels[2]["canaries"] >= 5
    assert levels[16]["differ"] > 0 and levels[16]["failing"]
    report = (tmp_path / "fault" / "report" / "report.md").read_text()
    first_paragraph = report.split("\n\n")[1]
    assert f"canaries differ at 16 users, first at word {levels[16]['first_word']}" in first_paragraph
    assert levels[16]["failing"][0] in first_paragraph


def test_without_the_fault_every_level_agrees(scenarios, tmp_path):
    """And the canaries count in the figures unless the analysis is told to leave them out."""
    summary = canary_ramp(scenarios, tmp_path / "clean")
    assert [level["agreement"] for level in summary["canaries"]] == [1.0, 1.0]
    assert "agree with the lowest level's at every level" in (tmp_path / "clean" / "report" / "report.md").read_text()
    run = tmp_path / "clean" / "run-1"
    canaries = sum(1 for row in read_rows(run / schema.REQUESTS_FILE) if row["canary"])
    without = analyse_args(run, tmp_path / "without", "--no-canaries")
    assert f"{canaries} canary requests left out" in " ".join(without["input_notes"])
    with_them = analyse_args(run, tmp_path / "with")
    assert sum(level["requests"] for level in with_them["levels"]) > sum(
        level["requests"] for level in without["levels"]
    )


def analyse_args(folder, out, *args: str) -> dict:
    assert analysis_main([str(folder), "--out", str(out), *args]) == 0
    return json.loads((out / "summary.json").read_text())


def write_answers(folder, differing_at_10: int) -> None:
    """answers.csv of a synthetic run (levels 5 and 10): 20 canaries per level, ``differing_at_10`` of level 10's
    answering (D) where level 5 answered (B)."""
    rows = [
        [f"r{users}-{i}", users, "local", f"q{i}", 1, "B", "The answer is (B)."] for users in (5, 10) for i in range(20)
    ]
    for row in rows[20 : 20 + differing_at_10]:
        row[-1] = "The answer is (D)."
    with open(folder / schema.ANSWERS_FILE, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([schema.ANSWER_COLUMNS, *rows])


def test_the_compare_gate_fails_an_agreement_drop_and_passes_a_repeat(tmp_path, capsys):
    base, cand, repeat = (small_run(tmp_path / name, loops=(5, 10)) for name in ("base", "cand", "repeat"))
    write_answers(base, 0)
    write_answers(cand, 4)  # 16 of 20 agree at 10 users: -20 %
    write_answers(repeat, 0)
    gate = "canary_agreement<-5%"
    code, out, _ = run_cli(capsys, "compare", base, cand, "--fail-on", gate)
    assert code == 1 and "regression: 10 users: canary_agreement 100.0 % -> 80.0 % (-20.0 %" in out
    code, out, _ = run_cli(capsys, "compare", base, repeat, "--fail-on", gate)
    assert code == 0 and "0 regression(s)" in out


@pytest.mark.parametrize(
    ("locustfile", "args"),
    [("generate", ()), ("sdk", ()), ("sdk", ("--no-stream",)), ("session", ("--turns", "3", "--turn-tokens", "8"))],
)
def test_every_user_asks_canaries_by_default_and_keeps_their_answers(
    module_simulator, run_locust, tmp_path, locustfile, args
):
    """With no canary option at all, each user class's first requests of the level are canaries (--canary-min),
    each answered as the simulator answers that question, the same text every time; a session's canaries are
    questions of their own, so its conversations still run turn 1, 2, 3 with their history."""
    sim = module_simulator("--answer-flip-rate=0")
    out = tmp_path / locustfile
    proc = run_locust(
        "-f", f"locustfiles/{locustfile}.py", "-H", sim.url, "-u", "2", "-r", "2", "-t", "5s", "--stop-timeout", "20",
        "--input-tokens", "32", "--output-tokens", "8", "--results-dir", str(out), "--headless", "--only-summary",
        "-L", "WARNING", *args,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = read_rows(out / schema.ANSWERS_FILE)
    assert len(answers) >= DEFAULT_CANARY_MIN and all(row["ok"] == "1" for row in answers)
    texts = {}
    for row in answers:
        texts.setdefault(row["canary"], set()).add(row["answer"])
    assert all(len(kept) == 1 and next(iter(kept)) for kept in texts.values()), texts  # one non-empty answer each
    rows = read_rows(out / schema.REQUESTS_FILE)
    assert sorted(row["request_id"] for row in rows if row["canary"]) == sorted(row["request_id"] for row in answers)
    turns: dict[str, list[int]] = {}
    for row in rows:
        if row["session_id"]:
            turns.setdefault(row["session_id"], []).append(int(row["turn"]))
    assert all(numbers == list(range(1, len(numbers) + 1)) for numbers in turns.values())
    assert (locustfile == "session") == bool(turns)
    assert all(not row["session_id"] for row in rows if row["canary"])
