"""Replaying agent sessions recorded as OpenTelemetry traces (OTLP/JSON, GenAI conventions) and TraceLab rounds
(--session-trace): the readers (turns, tokens, gaps, subagent fan-outs, growing histories; a bad file named in one
line), and one replay of the OTel sample against the simulator checked on what the server recorded: the recorded
lengths, the subagents in flight together and joined before the parent's next call, and the server's prefix-cache
hit rate against the trace's own reuse."""

import argparse
import copy
import gzip
import json
import re

import pytest

from tests.helpers import NO_CANARIES, REPO, recorded_sessions
from vllm_stress.analysis.cli import main as analyse
from vllm_stress.client.checks import StopTarget, check_session_trace
from vllm_stress.client.sessionmodel import subagents
from vllm_stress.client.sessiontrace import read_sessions
from vllm_stress.client.tracehistory import HISTORY_BLOCK_TOKENS, blocks_of
from vllm_stress.core.csvrows import read_rows
from vllm_stress.simulator.api.requestlog import read_request_log

OTEL = REPO / "scenarios" / "data" / "otel-sample.json"
TRACELAB = REPO / "scenarios" / "data" / "tracelab-sample.jsonl"
CAP_S = 0.3
NS = 10**9


def otel_export() -> dict:
    return json.loads(OTEL.read_text())


def sample_spans() -> list[dict]:
    return otel_export()["resourceSpans"][0]["scopeSpans"][0]["spans"]


def attrs(span: dict) -> dict:
    return {a["key"]: next(iter(a["value"].values())) for a in span["attributes"]}


def calls_of(parent: str) -> list[dict]:
    """The sample's LLM spans right under span ``parent``, in start order."""
    spans = [s for s in sample_spans() if s["parentSpanId"] == parent and "usage" in json.dumps(s["attributes"])]
    return sorted(spans, key=lambda s: int(s["startTimeUnixNano"]))


def span_named(name: str) -> dict:
    return next(s for s in sample_spans() if s["name"] == name)


def usage(span: dict) -> tuple[int, int]:
    a = attrs(span)
    return int(a.get("gen_ai.usage.input_tokens") or a["gen_ai.usage.prompt_tokens"]), int(
        a.get("gen_ai.usage.output_tokens") or a["gen_ai.usage.completion_tokens"]
    )


def seconds(span: dict, key: str) -> float:
    return int(span[key]) / NS


def test_an_otel_trace_is_a_session_its_calls_turns_its_child_agents_a_fanout():
    coder, chain = read_sessions(str(OTEL))
    root, explorer, reviewer = (span_named(f"invoke_agent {name}") for name in ("coder", "explorer", "reviewer"))
    own = calls_of(root["spanId"])
    assert coder.session_id == root["traceId"] and coder.block_tokens == HISTORY_BLOCK_TOKENS
    assert [(t.input_tokens, t.output_tokens) for t in coder.turns] == [usage(s) for s in own]
    assert [len(t.fanout) for t in coder.turns] == [0, 0, 2, 0] and coder.after == ()
    agents = coder.turns[2].fanout
    assert [(a.session_id, a.awaited) for a in agents] == [("explorer", True), ("reviewer", True)]
    for agent, span in zip(agents, (explorer, reviewer), strict=True):
        assert [(t.input_tokens, t.output_tokens) for t in agent.turns] == [usage(s) for s in calls_of(span["spanId"])]
        assert agent.block_salt == coder.block_salt == f"{coder.session_id}-"  # one trace: its blocks are its own
    # gaps: from the previous call's end to the call's start, or to its fan-out's launch (the first agent's start)
    ends = [seconds(s, "endTimeUnixNano") for s in own]
    starts = [seconds(s, "startTimeUnixNano") for s in own]
    launch = seconds(explorer, "startTimeUnixNano")
    wanted = [0.0, starts[1] - ends[0], launch - ends[1], starts[3] - ends[2]]
    assert [t.gap_s for t in coder.turns] == pytest.approx(wanted)
    first, second = calls_of(explorer["spanId"])
    assert agents[0].turns[1].gap_s == pytest.approx(
        seconds(second, "startTimeUnixNano") - seconds(first, "endTimeUnixNano")
    )
    # the subagents ran together; the parent's next call started after both had ended
    spans = [calls_of(agent["spanId"]) for agent in (explorer, reviewer)]
    assert max(seconds(s[0], "startTimeUnixNano") for s in spans) < min(seconds(s[0], "endTimeUnixNano") for s in spans)
    assert max(seconds(s[-1], "endTimeUnixNano") for s in spans) <= starts[2]
    # the older usage keys, no agent span at all: the trace's calls are its session's
    assert [(t.input_tokens, t.output_tokens) for t in chain.turns] == [
        usage(s) for s in calls_of(span_named("workflow")["spanId"])
    ]


def test_an_otel_conversation_grows_its_history_and_a_shorter_prompt_starts_over():
    coder, chain = read_sessions(str(OTEL))
    for session in (coder, *subagents(coder)):
        for before, turn in zip(session.turns, session.turns[1:], strict=False):
            assert turn.input_tokens >= before.input_tokens + before.output_tokens
            assert turn.hash_ids[: blocks_of(before.input_tokens)] == before.hash_ids  # the previous prompt's blocks
            assert turn.reused_blocks == len(before.hash_ids)  # those, not the answer's
            assert len(turn.hash_ids) == blocks_of(turn.input_tokens)
    assert chain.turns[2].input_tokens < chain.turns[1].input_tokens and chain.turns[2].reused_blocks == 0
    explorer, reviewer = coder.turns[2].fanout
    assert not set(explorer.turns[0].hash_ids) & (set(coder.turns[1].hash_ids) | set(reviewer.turns[0].hash_ids))


def agent_trace(*spans: tuple[str, str, str, float, float, dict]) -> dict:
    """An OTLP/JSON export of one trace: spans (id, parent, operation, start s, end s, usage)."""
    items = []
    for span_id, parent, operation, start, end, tokens in spans:
        attributes = [{"key": "gen_ai.operation.name", "value": {"stringValue": operation}}]
        attributes += [{"key": f"gen_ai.usage.{k}_tokens", "value": {"intValue": v}} for k, v in tokens.items()]
        if operation == "invoke_agent":
            attributes.append({"key": "gen_ai.agent.name", "value": {"stringValue": "helper"}})
        items.append(
            {
                "traceId": "t1",
                "spanId": span_id,
                "parentSpanId": parent,
                "name": f"{operation} {span_id}",
                "startTimeUnixNano": str(int(start * NS)),
                "endTimeUnixNano": str(int(end * NS)),
                "attributes": attributes,
            }
        )
    return {"resourceSpans": [{"scopeSpans": [{"spans": items}]}]}


def test_an_agent_running_past_the_parents_next_call_is_not_joined_and_one_after_the_last_is(tmp_path):
    """Subagents sharing a name are numbered; one still running at the parent's next call is launched unawaited,
    one launched after the parent's last call is waited for at its end; an agent under a subagent nests."""
    io = {"input": 100, "output": 10}
    trace = agent_trace(
        ("root", "", "invoke_agent", 0, 20, {}),
        ("c1", "root", "chat", 0, 1, io),
        ("a1", "root", "invoke_agent", 1.5, 9, {}),
        ("a1c", "a1", "chat", 1.6, 8.5, io),
        ("c2", "root", "chat", 3, 4, {"input": "250", "output": 5}),  # intValue as OTLP/JSON's text too
        ("a2", "root", "invoke_agent", 5, 7, {}),
        ("a2c", "a2", "chat", 5.1, 5.5, io),
        ("a3", "a2", "invoke_agent", 5.6, 6.5, {}),
        ("a3c", "a3", "chat", 5.7, 6.0, io),
        ("tool", "root", "execute_tool", 4, 5, {}),
    )
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(trace))
    (session,) = read_sessions(str(path))
    assert [(t.input_tokens, t.output_tokens) for t in session.turns] == [(100, 10), (250, 5)]
    (unjoined,) = session.turns[1].fanout
    assert (unjoined.session_id, unjoined.awaited) == ("helper-1", False)
    (last,) = session.after
    assert (last.session_id, last.awaited, len(last.turns)) == ("helper-2", True, 1)
    assert [(a.session_id, len(a.turns)) for a in last.after] == [("helper", 1)]  # nested: after its only call
    assert session.turns[1].gap_s == pytest.approx(0.5)  # from c1's end to a1's launch


def test_tracelab_rounds_are_turns_gapped_by_their_tools_and_sharing_their_prefix(tmp_path):
    rounds = [json.loads(line) for line in TRACELAB.read_text().splitlines()]
    sessions = read_sessions(str(TRACELAB))
    assert [s.session_id for s in sessions] == list(dict.fromkeys(r["session_id"] for r in rounds))
    for session in sessions:
        mine = sorted((r for r in rounds if r["session_id"] == session.session_id), key=lambda r: r["round_index"])
        assert [(t.input_tokens, t.output_tokens) for t in session.turns] == [
            (r["input_tokens_total"], r["output_tokens"]) for r in mine
        ]
        tools = [sum(t["tool_wall_latency_ms"] for t in r["tools"]) / 1000 for r in mine]
        assert [t.gap_s for t in session.turns] == pytest.approx([0.0, *tools[:-1]])
        for before, turn, r in zip(mine, session.turns[1:], mine[1:], strict=False):
            shared = min(r["prefix_tokens"], before["input_tokens_total"] + before["output_tokens"])
            sent = blocks_of(before["input_tokens_total"])
            assert turn.reused_blocks == min(shared // HISTORY_BLOCK_TOKENS, sent)
    assert any(
        0 < t.reused_blocks < blocks_of(b.input_tokens)
        for s in sessions
        for b, t in zip(s.turns, s.turns[1:], strict=False)
    )
    listed, packed = tmp_path / "rounds.json", tmp_path / "rounds.jsonl.gz"
    listed.write_text(json.dumps(list(reversed(rounds)), indent=1))  # a JSON list, in any order
    with gzip.open(packed, "wt") as gz:
        gz.write(TRACELAB.read_text())
    assert read_sessions(str(packed)) == sessions
    assert sorted(read_sessions(str(listed)), key=lambda s: s.session_id) == sorted(
        sessions, key=lambda s: s.session_id
    )


def changed_otel(change) -> str:
    export = copy.deepcopy(otel_export())
    change(export["resourceSpans"][0]["scopeSpans"][0]["spans"])
    return json.dumps(export)


def usage_of(spans: list[dict], index: int) -> dict:
    return next(a for a in spans[index]["attributes"] if a["key"] == "gen_ai.usage.output_tokens")["value"]


SPAN = r"resourceSpans\[0\]\.scopeSpans\[0\]\.spans"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        (changed_otel(lambda spans: spans[1].pop("spanId")), rf":2: {SPAN}\[1\]: no 'spanId'"),
        (
            changed_otel(lambda spans: spans[1].update(endTimeUnixNano="1")),
            rf":2: {SPAN}\[1\]: endTimeUnixNano is before startTimeUnixNano",
        ),
        (
            changed_otel(lambda spans: usage_of(spans, 1).update(intValue="0")),
            rf":2: {SPAN}\[1\]: span 'chat synthetic-agent': gen_ai.usage.output_tokens must be a whole number of "
            "at least 1, not 0",
        ),
        (
            changed_otel(lambda spans: spans[1].update(attributes={"a": 1})),
            rf":2: {SPAN}\[1\]: attributes must be a list",
        ),
        (
            changed_otel(lambda spans: spans[1].update(startTimeUnixNano="soon")),
            rf":2: {SPAN}\[1\]: startTimeUnixNano must be a whole number of ns, not 'soon'",
        ),
        ("{not json", ":2: not a JSON trace"),
        ('{"resourceSpans": {}}', ":2: resourceSpans: a list expected"),
    ],
)
def test_a_bad_otel_file_is_one_line_naming_the_file_line_and_span(tmp_path, text, why):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(otel_export()) + "\n" + text + "\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}{why}") as raised:
        read_sessions(str(bad))
    assert "\n" not in str(raised.value)


def test_an_otel_trace_whose_calls_are_all_its_subagents_or_none_is_refused(tmp_path):
    bad = tmp_path / "bad.json"
    io = {"input": 10, "output": 2}
    bad.write_text(
        json.dumps(
            agent_trace(
                ("r", "", "invoke_agent", 0, 9, {}), ("a", "r", "invoke_agent", 1, 5, {}), ("c", "a", "chat", 1, 2, io)
            )
        )
    )
    options = argparse.Namespace(
        trace="", trace_block_size=None, idle_gap_cap=None, session_trace=str(bad), session_start=""
    )
    with pytest.raises(StopTarget, match=r"^--session-trace: .*bad\.json: .*trace 't1': no LLM call of its own"):
        check_session_trace(options)
    bad.write_text(json.dumps(agent_trace(("r", "", "execute_tool", 0, 9, {}))))
    with pytest.raises(StopTarget, match=r"bad\.json: no LLM call"):
        check_session_trace(options)


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda r: r.update(output_tokens=0), "output_tokens must be a whole number of at least 1, not 0"),
        (lambda r: r.pop("session_id"), "no 'session_id'"),
        (lambda r: r.update(tools=[{"tool_wall_latency_ms": -5}]), "a tool latency must be ms of at least 0"),
        (lambda r: r.update(round_index="2"), "round_index must be a whole number"),
    ],
)
def test_a_bad_tracelab_round_is_one_line_naming_the_file_and_line(tmp_path, change, why):
    rounds = [json.loads(line) for line in TRACELAB.read_text().splitlines()]
    change(rounds[2])
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    with pytest.raises(ValueError, match=rf"^{re.escape(str(bad))}:3: not a TraceLab round \({re.escape(why)}"):
        read_sessions(str(bad))
    rounds[2] = json.loads(TRACELAB.read_text().splitlines()[2]) | {"prefix_tokens": 10**6}
    bad.write_text("".join(json.dumps(r) + "\n" for r in rounds))
    with pytest.raises(ValueError, match=r":3: prefix_tokens is more than input_tokens_total$"):
        read_sessions(str(bad))


def test_the_otel_sample_replays_its_lengths_fanout_and_prefix_reuse(simulator, run_locust, tmp_path):
    log = tmp_path / "server.jsonl"
    sim = simulator("--set", "t_fixed=0.005", "--enable-prompt-tokens-details", "--request-log", str(log))
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/session.py", "-H", sim.url, "-u", "2", "-r", "2", "-t", "8s"),
        *("--session-trace", str(OTEL), "--idle-gap-cap", str(CAP_S), "--session-seed", "1"),
        *("--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()  # its request log flushed
    served, rows = read_request_log(str(log)), read_rows(out / "requests.csv")
    recorded = recorded_sessions(read_sessions(str(OTEL)))
    turns: dict[tuple[str, int], dict] = {}
    for row in rows:
        trace, _replay, *agents = row["session_id"].split("/")
        turn = recorded["/".join([trace, *agents])].turns[int(row["turn"]) - 1]
        if row["ok"] == "1":  # the trace's lengths, as the run and the server counted them
            server = served[row["request_id"]]
            assert (int(row["prompt_tokens"]), int(row["completion_tokens"])) == (turn.input_tokens, turn.output_tokens)
            assert (server["prompt_tokens"], server["completion_tokens"]) == (turn.input_tokens, turn.output_tokens)
            turns[row["session_id"], int(row["turn"])] = server
    coder = next(iter(recorded))
    parents = [sid for sid, number in turns if number == 3 and sid.startswith(f"{coder}/")]
    assert parents, sorted(turns)  # a fan-out was replayed to its join
    for parent in parents:
        agents = [turns[f"{parent}/{name}", n] for name in ("explorer", "reviewer") for n in (1, 2)]
        firsts = agents[0], agents[2]
        assert max(t["arrival"] for t in firsts) < min(t["end"] for t in firsts)  # the subagents ran together
        assert turns[parent, 3]["arrival"] >= max(t["end"] for t in agents)  # the join
        assert turns[parent, 3]["arrival"] - turns[parent, 2]["end"] <= CAP_S + 1.5  # the gap capped

    assert analyse([str(out), "--out", str(out / "report")]) == 0
    level = json.loads((out / "report" / "summary.json").read_text())["levels"][-1]
    reuse, hit_rate = level["trace_block_reuse"], level["server_prefix_hit_rate"]
    assert reuse > 0.3 and hit_rate == pytest.approx(reuse, abs=0.03), (reuse, hit_rate)
