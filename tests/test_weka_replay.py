"""Replaying Weka agent traces (--session-trace; kv-cache-tester's and AgentX's format): the reader (one trace, JSONL,
a folder; fan-outs, async subagents, nesting, local and global hash ids; a bad trace named in one line), and replays
against the simulator checked on what the server recorded: a fan-out's subagents in flight together, the parent's
next turn after their join (not after an async one), the recorded answer lengths, the capped gaps, and a stop that
cuts subagents mid-request leaving a row for each request started."""

import argparse
import copy
import gzip
import json
import re
import shutil

import pytest

from tests.helpers import NO_CANARIES, REPO, recorded_sessions
from vllm_stress.client.checks import StopTarget, check_session_trace
from vllm_stress.client.sessionmodel import most_in_flight, subagents
from vllm_stress.client.sessiontrace import capped_gap, read_sessions
from vllm_stress.core.csvrows import read_rows
from vllm_stress.simulator.api.requestlog import read_request_log

SAMPLE = REPO / "scenarios" / "data" / "weka-sample.jsonl"
CAP_S = 0.3
SIM = ("--set", "t_fixed=0.005")  # decode steps of some 8 ms: a 30-token answer takes a quarter of a second


def sample_traces() -> list[dict]:
    return [json.loads(line) for line in SAMPLE.read_text().splitlines()]


def test_a_fanout_is_read_as_concurrent_subagents_before_the_parents_next_turn():
    fanout, nested, plain = read_sessions(str(SAMPLE))
    recorded = sample_traces()[0]["requests"]
    calls = [item for item in recorded if item["type"] != "subagent"]
    assert [(t.input_tokens, t.output_tokens) for t in fanout.turns] == [(c["in"], c["out"]) for c in calls]
    assert [len(t.fanout) for t in fanout.turns] == [0, 0, 3, 1, 0] and fanout.after == ()
    explore = fanout.turns[2].fanout
    assert [(a.session_id, len(a.turns), a.awaited) for a in explore] == [
        ("explore-1", 2, True),
        ("explore-2", 1, True),
        ("explore-3", 1, True),
    ]
    (background,) = fanout.turns[3].fanout
    assert background.session_id == "background-1" and not background.awaited  # async_launched: not joined
    # gaps: think_time when given (0.2, 0, 30), else from the previous call to the fan-out's launch (5.0 - 3.0)
    assert [t.gap_s for t in fanout.turns] == [0.0, 0.2, 2.0, 0.0, 30.0]
    assert [t.gap_s for t in explore[0].turns] == [0.0, pytest.approx(1.9)]  # a subagent's first: none
    assert explore[0].turns[1].reused_blocks == len(explore[0].turns[0].hash_ids)  # its own history repeated
    assert fanout.turns[1].reused_blocks == len(fanout.turns[0].hash_ids)
    (planner,) = nested.turns[1].fanout  # nesting: the planner fans out to a worker before its second call
    assert [[a.session_id for a in t.fanout] for t in planner.turns] == [[], ["worker"]]
    assert planner.turns[1].gap_s == pytest.approx(0.4)  # 2.5 (the worker's launch) - 2.1
    assert [most_in_flight(s) for s in (fanout, nested, plain)] == [5, 3, 1]
    assert subagents(nested) == (planner,) and subagents(planner) == planner.turns[1].fanout
    # local hash ids are salted per trace (and shared with its subagents), global ones shared by all traces
    assert (fanout.block_salt, nested.block_salt, plain.block_salt) == ("weka-fanout-", "weka-nested-", "")
    assert {a.block_salt for a in explore} == {"weka-fanout-"} and fanout.block_tokens == 64


def test_one_trace_a_gzip_jsonl_and_a_folder_read_alike(tmp_path):
    sessions = read_sessions(str(SAMPLE))
    folder = tmp_path / "traces"
    folder.mkdir()
    for number, trace in enumerate(sample_traces()):
        (folder / f"{number}.json").write_text(json.dumps(trace, indent=2))  # one object over many lines
    (folder / "notes.txt").write_text("not a trace")
    assert read_sessions(str(folder)) == sessions
    assert read_sessions(str(folder / "1.json")) == sessions[1:2]
    packed = tmp_path / "weka.jsonl.gz"
    with open(SAMPLE, "rb") as plain, gzip.open(packed, "wb") as gz:
        shutil.copyfileobj(plain, gz)
    assert read_sessions(str(packed)) == sessions
    (folder / "3.json").write_text('{"session_id": 1, "input_length": 9, "output_length": 2}')
    with pytest.raises(ValueError, match=r"3\.json: not a Weka trace"):
        read_sessions(str(folder))
    with pytest.raises(ValueError, match="a folder without .json traces"):
        read_sessions(str(tmp_path))


def broken(change) -> str:
    """The sample's first trace after ``change(trace)``, as a JSONL line."""
    trace = copy.deepcopy(sample_traces()[0])
    change(trace)
    return json.dumps(trace)


@pytest.mark.parametrize(
    ("change", "where", "why"),
    [
        (lambda tr: tr["requests"][3]["requests"][0].update({"in": 0}), r"requests\[3\]\.requests\[0\]", "in must be"),
        (lambda tr: tr["requests"][2]["requests"][1].pop("out"), r"requests\[2\]\.requests\[1\]", "no 'out'"),
        (lambda tr: tr["requests"][1].update({"colour": "red"}), r"requests\[1\]", "unknown key 'colour'"),
        (lambda tr: tr["requests"][7].update({"type": "x"}), r"requests\[7\]", "type must be n, s or subagent"),
        (lambda tr: tr["requests"][5].update({"t": 1.0}), r"requests\[5\]", "its t is before the previous call's"),
        (lambda tr: tr["requests"][6].update({"status": []}), r"requests\[6\]", "status must be text"),
        (
            lambda tr: tr["requests"][4].update({"requests": {}}),
            r"requests\[4\]\.requests",
            "a list of requests expected",
        ),
        (lambda tr: tr.update({"hash_id_scope": "team"}), "", "hash_id_scope must be local or global"),
    ],
)
def test_a_bad_trace_is_one_line_naming_the_file_trace_and_request(tmp_path, change, where, why):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(sample_traces()[1]) + "\n" + broken(change) + "\n")
    located = rf": trace 'weka-fanout': {where}" if where else ""  # a trace without its id yet: the line alone
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}:2{located}: {why}") as raised:
        read_sessions(str(bad))
    assert "\n" not in str(raised.value)


def test_a_bad_file_stops_the_run_before_it_starts(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"id": "x", "block_size": 64, "requests": [{"t": 0, "type": "subagent"}]}))
    options = argparse.Namespace(
        trace="", trace_block_size=None, idle_gap_cap=None, session_trace=str(bad), session_start=""
    )
    with pytest.raises(StopTarget, match=r"^--session-trace: .*bad\.json: trace 'x': requests\[0\]: no 'agent_id'$"):
        check_session_trace(options)
    bad.write_text(json.dumps({"id": "x", "block_size": 64, "requests": []}))
    with pytest.raises(StopTarget, match=r"bad\.json: trace 'x': no call of its own"):
        check_session_trace(options)
    bad.write_text(json.dumps(sample_traces()[0]) + "\n{not json\n")
    with pytest.raises(StopTarget, match=r"bad\.json:2: not a JSON trace"):
        check_session_trace(options)


def replay(simulator, run_locust, tmp_path, trace, *args: str) -> tuple[dict, list[dict]]:
    """Replay ``trace`` on a simulator with a request log: (the server's record by request id, the rows), every row
    one the server logged but those the stop cut before the server had them (Aborted)."""
    log = tmp_path / "server.jsonl"
    sim = simulator(*SIM, "--request-log", str(log))
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/session.py", "-H", sim.url, "-r", "2", *args),
        *("--session-trace", str(trace), "--idle-gap-cap", str(CAP_S), "--session-seed", "1"),
        *("--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()  # its request log flushed
    served, rows = read_request_log(str(log)), read_rows(out / "requests.csv")
    unseen = [row for row in rows if row["request_id"] not in served]
    assert set(served) <= {row["request_id"] for row in rows} and all(row["error"] == "Aborted" for row in unseen)
    return served, rows


def test_a_fanout_runs_together_and_joins_before_the_parents_next_turn(simulator, run_locust, tmp_path):
    served, rows = replay(simulator, run_locust, tmp_path, SAMPLE, "-u", "2", "-t", "7s")
    recorded = recorded_sessions(read_sessions(str(SAMPLE)))
    turns: dict[tuple[str, int], dict] = {}  # (session id, turn) -> the server's record of that turn
    for row in rows:
        trace, _replay, *agents = row["session_id"].split("/")
        turn = recorded["/".join([trace, *agents])].turns[int(row["turn"]) - 1]
        if row["ok"] == "1":  # the recorded lengths, as the server counted them
            server = served[row["request_id"]]
            assert int(row["completion_tokens"]) == server["completion_tokens"] == turn.output_tokens, row
            assert server["prompt_tokens"] == turn.input_tokens
            turns[row["session_id"], int(row["turn"])] = server
    fanouts = [sid for sid, turn in turns if turn == 5 and sid.startswith("weka-fanout/")]
    nested = [sid for sid, turn in turns if turn == 3 and sid.startswith("weka-nested/")]
    assert fanouts and nested, sorted(turns)  # a whole session of each was replayed
    for parent in fanouts:
        explore = [turns[f"{parent}/explore-{n}", 1] for n in (1, 2, 3)]
        assert max(t["arrival"] for t in explore) < min(t["end"] for t in explore)  # all three in flight at once
        ended = max(t["end"] for t in [*explore, turns[f"{parent}/explore-1", 2]])
        assert turns[parent, 3]["arrival"] >= ended  # the join: the parent's next turn after the last one ended
        assert turns[parent, 4]["arrival"] < turns[f"{parent}/background-1", 1]["end"]  # async: not waited for
    for parent in nested:
        planner, worker = turns[f"{parent}/planner", 2], turns[f"{parent}/planner/worker", 1]
        assert planner["arrival"] >= worker["end"] and turns[parent, 2]["arrival"] >= planner["end"]

    gaps = []  # (the server's idle time before a turn, its recorded gap capped)
    for (sid, number), server in turns.items():
        before = turns.get((sid, number - 1))
        path = "/".join(part for n, part in enumerate(sid.split("/")) if n != 1)
        turn = recorded[path].turns[number - 1]
        if before and not turn.fanout:  # (a fan-out's gap is before its subagents' first turns)
            gaps.append((server["arrival"] - before["end"], capped_gap(turn.gap_s, CAP_S)))
    for parent in fanouts:  # a fan-out's gap: from the parent's previous turn to its subagents' first turns
        launched = min(turns[f"{parent}/explore-{n}", 1]["arrival"] for n in (1, 2, 3))
        gaps.append((launched - turns[parent, 2]["end"], capped_gap(recorded["weka-fanout"].turns[2].gap_s, CAP_S)))
    assert {wanted for _, wanted in gaps} >= {0.2, CAP_S}  # a 30 s think time and a 1.9 s gap waited 0.3 s
    for idle, wanted in gaps:
        assert wanted - 0.05 <= idle <= wanted + 1.0, gaps


STOPPED = {
    "id": "stopped",
    "block_size": 64,
    "requests": [
        {"t": 0, "type": "n", "in": 200, "out": 8, "hash_ids": [1, 2, 3]},
        *(
            {"t": 1, "type": "subagent", "agent_id": f"long-{n}", "status": status, "requests": [long]}
            for n, (status, long) in enumerate(
                [("completed", {"t": 1, "type": "s", "in": 150, "out": 3000, "hash_ids": [1, 7]})] * 2
                + [("async_launched", {"t": 1, "type": "n", "in": 150, "out": 3000, "hash_ids": [1, 8]})]
            )
        ),
        {"t": 9, "type": "n", "in": 300, "out": 8, "hash_ids": [1, 2, 3, 4, 5]},
    ],
}


def test_a_stop_cuts_the_subagents_in_flight_each_a_row(simulator, run_locust, tmp_path):
    """A fan-out of three long subagent answers (one async) cut by the run's stop: each an Aborted row of its own
    session id, none left running (the run ends on time), the parent's next turn never sent."""
    trace = tmp_path / "stopped.json"
    trace.write_text(json.dumps(STOPPED))
    served, rows = replay(simulator, run_locust, tmp_path, trace, "-u", "1", "-t", "3s")
    by_session = {row["session_id"]: row for row in rows}
    assert set(by_session) == {"stopped/0", *(f"stopped/0/long-{n}" for n in range(3))}, rows  # no turn 2
    assert by_session["stopped/0"]["ok"] == "1" and len(rows) == 4
    for n in range(3):
        cut = by_session[f"stopped/0/long-{n}"]
        assert cut["error"] == "Aborted" and cut["request_id"] in served  # started, cut by the stop
