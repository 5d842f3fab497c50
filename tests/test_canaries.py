"""Correctness canaries (issue 44): which requests are canaries, how answers are compared across levels, and the
simulator's answer fault seen end to end (answers changed above a batch of 8) and its absence (agreement 1.0)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from benchmarks.harness import read_rows
from tests.helpers import locust_stats, run_cli, small_run
from vllm_stress.analysis.cli import main as analysis_main
from vllm_stress.analysis.features.canary_answers import canary_levels, changed_line, first_diverging_word
from vllm_stress.analysis.io.load import load_run
from vllm_stress.client.canary import DEFAULT_CANARY_MIN, DEFAULT_CANARY_SET, Canaries
from vllm_stress.core import schema
from vllm_stress.core.questions import Question, load_questions, prompt
from vllm_stress.simulator.api.requestlog import read_request_log

FORMATS_FIXTURES = Path(__file__).parent / "fixtures" / "formats"


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


def answer(users: int, canary: str, text: str, gold: str = "B", model: str = "m") -> dict[str, str]:
    return {"users": str(users), "canary": canary, "model": model, "answer": text, "gold": gold, "ok": "1"}


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


def test_answers_are_compared_per_model():
    """Two models answer the same prompt differently at every level: that is no change under load. Each model's
    answers are compared with its own at the lowest level it answered at (the adapter's first at 8 users)."""
    rows = [
        answer(1, "a", "The answer is (B)."),
        answer(8, "a", "The answer is (B)."),
        answer(8, "a", "(C) it is.", model="adapter-1"),
        answer(16, "a", "(C) it is.", model="adapter-1"),
        answer(16, "a", "(C) it was.", model="adapter-1"),
    ]
    levels = {level["users"]: level for level in canary_levels(rows)}
    assert [levels[u]["agreement"] for u in (1, 8)] == [1.0, 1.0] and levels[8]["models"] == ["adapter-1", "m"]
    assert levels[16]["differ"] == 1 and levels[16]["failing"] == ["a (adapter-1)"] and levels[16]["first_word"] == 3


def canary_ramp(scenarios, out, *simulator_args: str) -> dict:
    """A ramp of 2 then 16 users against the simulator (no random flips), a third of the requests canaries; the
    summary (its one config's). One worker and holds of 2 s (smoke's are 4 s): the canaries are counted over each
    whole level, and a 2 s hold still ends dozens of rows at 2 users and hundreds at 16; one worker keeps 16
    streams in flight, twice the fault's batch of 8."""
    code = scenarios(
        [
            "run",
            "--scenario",
            "smoke",
            "--out",
            str(out),
            "--workers",
            "1",
            "--simulator-arg=--answer-flip-rate=0",
            *(f"--simulator-arg={arg}" for arg in simulator_args),
            "--locust-arg=--levels=2,16",
            "--locust-arg=--step-time=2",
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
    """And the canaries stay out of the figures unless the analysis is told to count them in."""
    summary = canary_ramp(scenarios, tmp_path / "clean")
    assert [level["agreement"] for level in summary["canaries"]] == [1.0, 1.0]
    assert "agree with the lowest level's at every level" in (tmp_path / "clean" / "report" / "report.md").read_text()
    run = tmp_path / "clean" / "run-1"
    assert counted_rows(run, canaries=True) > counted_rows(run, canaries=False)  # a third of them are canaries
    assert sum(level["requests"] for level in summary["levels"]) == counted_rows(run, canaries=False)
    counted_in = analyse_args(run, tmp_path / "with", "--canaries-in-figures")
    assert sum(level["requests"] for level in counted_in["levels"]) == counted_rows(run, canaries=True)


def test_a_default_smoke_run_keeps_its_canaries_apart(scenarios, tmp_path):
    """With no canary option: the server got the canaries (the set's questions), Locust's statistics list them
    under their own name, the report counts every other request and none of them, and compares their answers per
    level. (Holds of 2 s, not smoke's 4: the canaries are each level's first requests, the counts hold whatever
    the hold.)"""
    out, log = tmp_path / "smoke", tmp_path / "requests.jsonl"
    hold = "--locust-arg=--step-time=2"
    code = scenarios(["run", "--scenario", "smoke", "--out", str(out), hold, f"--simulator-arg=--request-log={log}"])
    assert code == 0
    run = out / "run-1"
    rows = read_rows(run / schema.REQUESTS_FILE)
    questions = {prompt(q) for q in load_questions(DEFAULT_CANARY_SET)}
    served = read_request_log(str(log))
    asked = {rid for rid, record in served.items() if record["messages"][-1]["content"] in questions}
    canary_ids = {row["request_id"] for row in rows if row["canary"]}
    finished = {row["request_id"] for row in rows if row["canary"] and row["error"] != schema.ABORTED}
    assert finished and finished <= asked <= canary_ids  # the server's view is the rows' (one cut at the stop aside)
    assert {row["request_id"] for row in rows if row["error"] != schema.ABORTED} <= served.keys()
    stats = locust_stats(run / "locust")
    ended = [row for row in rows if row["error"] != schema.ABORTED]
    assert int(stats["POST", "chat canary"]["Request Count"]) == sum(1 for row in ended if row["canary"])
    assert int(stats["POST", "chat"]["Request Count"]) == sum(1 for row in ended if not row["canary"])
    summary = json.loads((out / "report" / "summary.json").read_text())
    assert sum(level["requests"] for level in summary["levels"]) == counted_rows(run, canaries=False)
    assert [level["users"] for level in summary["canaries"]] == [2, 4]
    assert all(
        level["agreement"] is not None and level["canaries"] >= DEFAULT_CANARY_MIN for level in summary["canaries"]
    )
    assert "## Canaries" in (out / "report" / "report.md").read_text()


def test_canaries_carry_no_session_header_and_no_class_model_unless_asked(simulator, run_locust, tmp_path):
    """A session run of two classes, each with an adapter, one asking its canaries to use it (canaries=model), the
    routers' session header on: the server's log shows each canary with the run's model unless its class asked, and
    none with the session header every conversation's turns carry; answers.csv names the model asked."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--lora-adapters=2", "--answer-flip-rate=0", "--request-log", str(log))
    out = tmp_path / "run"
    classes = "plain:model=adapter-0; asks:model=adapter-1,canaries=model"
    proc = run_locust(
        "-f", "locustfiles/session.py", "-H", sim.url, "-u", "4", "-r", "4", "-t", "6s", "--stop-timeout", "20",
        "--turns", "3", "--turn-tokens", "8", "--input-tokens", "32", "--output-tokens", "8",
        "--session-header", "X-Session-Id", f"--traffic-class={classes}", "--canary-share=0.2",
        "--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()  # flushes the log
    served = read_request_log(str(log))
    rows = read_rows(out / schema.REQUESTS_FILE)
    answers = {row["request_id"]: row for row in read_rows(out / schema.ANSWERS_FILE)}
    adapters = {"plain": "adapter-0", "asks": "adapter-1"}
    canaries = [row for row in rows if row["canary"]]
    assert {row["class"] for row in canaries} == {"plain", "asks"}
    for row in (row for row in rows if row["error"] != schema.ABORTED):  # one cut at the stop may be unlogged
        record = served[row["request_id"]]
        if row["canary"]:
            model = adapters["asks"] if row["class"] == "asks" else sim.model
            assert record["model"] == answers[row["request_id"]]["model"] == model, row
            assert "x-session-id" not in record["headers"]
        else:
            assert record["model"] == adapters[row["class"]] and "x-session-id" in record["headers"], row


def analyse_args(folder, out, *args: str) -> dict:
    assert analysis_main([str(folder), "--out", str(out), *args]) == 0
    return json.loads((out / "summary.json").read_text())


def counted_rows(run: Path, canaries: bool) -> int:
    """The rows a report counts (ended in their level's hold, not aborted), with or without the canaries'."""
    holds = {row["users"]: (float(row["hold_start"]), float(row["hold_end"])) for row in read_rows(run / "levels.csv")}
    return sum(
        1
        for row in read_rows(run / schema.REQUESTS_FILE)
        if (canaries or not row["canary"])
        and row["error"] != schema.ABORTED
        and holds[row["users"]][0] <= float(row["end_time"]) <= holds[row["users"]][1]
    )


def test_an_earlier_formats_canaries_are_kept_apart_unless_counted_in(tmp_path):
    """Format 4's fixture, written when canaries counted in every figure and answers.csv had no model: its canaries
    are told apart by their rows' canary id and kept apart from the figures' rows; --canaries-in-figures, or a
    run.json that says the run counted them in, puts them back. Its report still compares their answers per level."""
    run = FORMATS_FIXTURES / "v4" / "run"
    rows = read_rows(run / schema.REQUESTS_FILE)
    canaries = sum(1 for row in rows if row["canary"])
    assert canaries > 0
    apart = load_run(run)
    assert apart.format_version == 4 and not apart.requests["canary"].notna().any()
    assert (len(apart.requests), len(apart.canaries)) == (len(rows) - canaries, canaries)
    assert len(load_run(run, canaries_in_figures=True).requests) == len(rows)
    said = shutil.copytree(run, tmp_path / "said")
    meta = json.loads((said / schema.RUN_FILE).read_text())
    (said / schema.RUN_FILE).write_text(json.dumps(meta | {"canaries_in_figures": True}))
    assert len(load_run(said).requests) == len(rows) and len(load_run(said, canaries_in_figures=False).canaries)
    summary = analyse_args(run, tmp_path / "report")
    assert [(level["users"], level["models"], level["agreement"]) for level in summary["canaries"]] == [
        (2, [""], 1.0),  # no model column: one unnamed model's answers
        (4, [""], 1.0),
    ]


def test_a_failed_canary_counts_in_the_whole_runs_failures_not_in_a_levels(tmp_path):
    """Format 4's fixture with one canary failed: the report's failures over the whole run name it (as Locust's
    failures table does), the levels' failures do not."""
    run = shutil.copytree(FORMATS_FIXTURES / "v4" / "run", tmp_path / "run")
    rows = read_rows(run / schema.REQUESTS_FILE)
    failed = next(row for row in rows if row["canary"])
    failed |= {"ok": "0", "error": "HTTP 500", "status": "500"}
    with open(run / schema.REQUESTS_FILE, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    summary = analyse_args(run, tmp_path / "report")
    assert summary["errors"] == {"HTTP 500": 1} and sum(level["failures"] for level in summary["levels"]) == 0


def write_answers(folder, differing_at_10: int) -> None:
    """answers.csv of a synthetic run (levels 5 and 10): 20 canaries per level, ``differing_at_10`` of level 10's
    answering (D) where level 5 answered (B)."""
    rows = [
        [f"r{users}-{i}", users, "local", f"q{i}", "m", 1, "B", "The answer is (B)."]
        for users in (5, 10)
        for i in range(20)
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
    [
        ("generate", ()),
        ("sdk", ()),
        ("sdk", ("--no-stream", "--canaries-in-figures")),
        ("session", ("--turns", "3", "--turn-tokens", "8")),
    ],
)
def test_every_user_asks_canaries_by_default_and_keeps_their_answers(
    module_simulator, run_locust, tmp_path, locustfile, args
):
    """With no canary option at all, each user class's first requests of the level are canaries (--canary-min),
    each answered as the simulator answers that question, the same text every time; a session's canaries are
    questions of their own, so its conversations still run turn 1, 2, 3 with their history. Locust's statistics
    list them under their own name, or the request's own with --canaries-in-figures (which run.json says)."""
    sim = module_simulator("--answer-flip-rate=0")
    out = tmp_path / locustfile
    proc = run_locust(
        "-f", f"locustfiles/{locustfile}.py", "-H", sim.url, "-u", "2", "-r", "2", "-t", "5s", "--stop-timeout", "20",
        "--input-tokens", "32", "--output-tokens", "8", "--results-dir", str(out), "--headless", "--only-summary",
        "-L", "WARNING", "--csv", str(out / "locust"), *args,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    answers = read_rows(out / schema.ANSWERS_FILE)
    assert len(answers) >= DEFAULT_CANARY_MIN and all(row["ok"] == "1" for row in answers)
    assert {row["model"] for row in answers} == {"" if locustfile == "generate" else sim.model}  # /generate names none
    in_figures = "--canaries-in-figures" in args
    names = {name for _, name in locust_stats(out / "locust")}
    assert any(name.endswith(" canary") for name in names) != in_figures, names
    assert json.loads((out / schema.RUN_FILE).read_text())["canaries_in_figures"] is in_figures
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
