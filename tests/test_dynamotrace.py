"""Reading NVIDIA Dynamo request traces as recorded agent sessions (--session-trace; dynamotrace.py): request_end
records as turns of their agent sessions (envelopes and bare records, markers and tool events read past), their
gaps, sequence hashes (64-bit), block size and reuse; subagents joined or not and launched after the last turn; a
trace without hashes as growing histories; the jsonl_gz sink's segments read in segment order from their folder and
their prefix; the sample; and a bad trace named in one line."""

import argparse
import gzip
import json
import re

import pytest

from tests.helpers import REPO
from vllm_stress.client.checks import StopTarget, check_session_trace
from vllm_stress.client.prompts import block_words
from vllm_stress.client.sessionmodel import subagents
from vllm_stress.client.sessiontrace import read_sessions
from vllm_stress.client.tracehistory import HISTORY_BLOCK_TOKENS, blocks_of

SAMPLE = REPO / "scenarios" / "data" / "dynamo-sample.jsonl"
SCHEMA = "dynamo.request.trace.v1"
T0 = 1_700_000_000_000  # unix ms of a test trace's start
U64 = 2**64
# the jsonl_gz sink's segments, written in this order (past a million, the numbers grow a digit)
SEGMENTS = (("000010", "s10"), ("000000", "s0"), ("1000000", "sM"), ("000002", "s2"), ("999999", "s9"))


def request_end(
    session: str | None,
    received_ms: int | None,
    total_ms: int | None,
    tokens: tuple[int, int],
    hashes: list[int] | None = None,
    block: int = 16,
    **context: str,
) -> dict:
    """A bare request_end record of ``session`` (None: no agent_context): received and taking ``total_ms`` ms from
    ``received_ms`` after T0 (None: left out), ``tokens`` in and out, its replay's ``hashes`` of ``block`` tokens."""
    request: dict = {"request_id": f"r{received_ms}", "input_tokens": tokens[0], "output_tokens": tokens[1]}
    if received_ms is not None:
        request["request_received_ms"] = T0 + received_ms
    if total_ms is not None:
        request["total_time_ms"] = total_ms
    if hashes is not None:
        request["replay"] = {"trace_block_size": block, "input_length": tokens[0], "input_sequence_hashes": hashes}
    end = (received_ms or 0) + (total_ms or 0)
    record = {"schema": SCHEMA, "event_type": "request_end", "event_time_unix_ms": T0 + end, "event_source": "dynamo"}
    if session is not None:
        record["agent_context"] = {"session_id": session, "trajectory_id": session, **context}
    return record | {"request": request}


def tool_event(session: str, kind: str, at_ms: int) -> dict:
    return {
        "schema": SCHEMA,
        "event_type": kind,
        "event_time_unix_ms": T0 + at_ms,
        "event_source": "harness",
        "agent_context": {"session_id": session},
        "tool": {"tool_call_id": "c1", "tool_class": "bash", "status": "success", "duration_ms": 900},
    }


def envelope(record: dict) -> dict:
    """A file sink's line: the record with the writer's ms."""
    return {"timestamp": record["event_time_unix_ms"] - T0, "event": record}


def write(path, lines: list[dict | str]) -> str:
    """``lines`` (records, envelopes, markers; text as it is) one a line, gzip-compressed for a ``.gz`` name."""
    text = "".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines)
    if str(path).endswith(".gz"):
        with gzip.open(path, "wt") as gz:
            gz.write(text)
    else:
        path.write_text(text)
    return str(path)


def test_request_ends_are_turns_of_their_sessions_in_received_order(tmp_path):
    third = request_end("a", 9000, 1000, (80, 5), [1, 2, 3, 4, 5])
    second = request_end("a", 5000, 1500, (50, 20), [1, 2, 3])
    del second["request"]["replay"]["input_length"]  # its prompt: request.input_tokens
    first = request_end("a", 0, 2000, (40, 10), [1, 2])
    first["request"]["input_tokens"] = 999  # replay.input_length first
    trace = write(
        tmp_path / "trace.jsonl",
        [
            envelope(first),
            tool_event("a", "tool_start", 2100),
            envelope(request_end("b", 1000, 500, (30, 6), [1, 7])),
            "",
            tool_event("a", "tool_end", 3000),
            third,  # bare, before the turn received before it
            envelope(second),
            request_end(None, 6000, 100, (10, 2), [9]),  # no agent_context: left out
            envelope(request_end("b", 3000, None, (45, 9), [1, 7, 8]) | {"agent_context": {"session_id": None}}),
            envelope(request_end("b", None, None, (45, 9), [1, 7, 8]) | {"event_time_unix_ms": T0 + 3000}),
            {"uploader": "done", "lines": 9},  # a marker: no schema
        ],
    )
    a, b = read_sessions(trace)
    assert (a.session_id, a.block_tokens, a.block_salt, a.after) == ("a", 16, "", ())
    assert [(t.input_tokens, t.output_tokens) for t in a.turns] == [(40, 10), (50, 20), (80, 5)]
    assert [t.gap_s for t in a.turns] == [0.0, 3.0, 2.5]  # received less the previous one's received + total
    assert [t.hash_ids for t in a.turns] == [(1, 2), (1, 2, 3), (1, 2, 3, 4, 5)]
    assert [t.reused_blocks for t in a.turns] == [0, 2, 3]
    # a request received only by its record's time ends then; a hash another session had is not reused in this one
    assert [(t.input_tokens, t.gap_s, t.hash_ids, t.reused_blocks) for t in b.turns] == [
        (30, 0.0, (1, 7), 0),
        (45, 1.5, (1, 7, 8), 2),
    ]
    assert all(t.fanout == () for t in a.turns + b.turns)


def test_a_subagent_is_a_fanout_joined_when_it_ended_before_the_parents_next_turn(tmp_path):
    trace = write(
        tmp_path / "agents.jsonl",
        [
            envelope(request_end("p", 0, 1000, (100, 10), [1])),
            envelope(request_end("j", 2000, 1000, (60, 5), [1, 20], parent_trajectory_id="p", parent_session_id="x")),
            envelope(request_end("j", 3500, 1000, (80, 5), [1, 20, 21], parent_trajectory_id="p")),
            envelope(request_end("p", 5000, 1000, (200, 10), [1, 2])),
            envelope(request_end("u", 7000, 18000, (50, 5), [30], parent_session_id="p")),  # the older link
            envelope(request_end("p", 20000, 1000, (300, 10), [1, 2, 3])),
            envelope(request_end("z", 30000, 1000, (40, 5), [40], parent_trajectory_id="p")),
            envelope(request_end("o", 1000, 500, (40, 5), [50], parent_trajectory_id="not-in-the-trace")),
        ],
    )
    p, o = read_sessions(trace)
    assert (o.session_id, len(o.turns)) == ("o", 1)  # its parent is not in the trace: a session of its own
    assert [[(a.session_id, a.awaited) for a in t.fanout] for t in p.turns] == [[], [("j", True)], [("u", False)]]
    assert [(a.session_id, a.awaited, len(a.turns)) for a in p.after] == [("z", True, 1)]
    assert subagents(p) == (p.turns[1].fanout[0], p.turns[2].fanout[0], p.after[0])
    # a turn's gap runs to its fan-out's launch: j's first request at 2 s, u's at 7 s
    assert [t.gap_s for t in p.turns] == [0.0, 1.0, 1.0]
    (j,) = p.turns[1].fanout
    assert [(t.input_tokens, t.gap_s, t.reused_blocks) for t in j.turns] == [(60, 0.0, 0), (80, 0.5, 2)]
    assert j.block_tokens == 16


def test_a_trace_without_sequence_hashes_grows_a_history_per_session(tmp_path):
    trace = write(
        tmp_path / "plain.jsonl",
        [
            request_end("s", 0, 1000, (40, 10)),
            request_end("s", 2000, 1000, (80, 10)),
            request_end("t", 1500, 300, (40, 10), parent_trajectory_id="s"),
        ],
    )
    (s,) = read_sessions(trace)
    (t,) = s.turns[1].fanout
    assert s.block_tokens == t.block_tokens == HISTORY_BLOCK_TOKENS
    assert [len(turn.hash_ids) for turn in s.turns] == [blocks_of(40), blocks_of(80)]
    assert s.turns[1].hash_ids[:2] == s.turns[0].hash_ids[:2] and s.turns[1].reused_blocks == blocks_of(40)
    assert not set(t.turns[0].hash_ids) & {h for turn in s.turns for h in turn.hash_ids}


def test_sequence_hashes_are_64_bit_and_equal_ones_the_same_words(tmp_path):
    top, high = U64 - 1, 2**63 + 5
    trace = write(
        tmp_path / "u64.jsonl",
        [
            request_end("a", 0, 100, (32, 4), [top, high]),
            request_end("a", 200, 100, (48, 4), [top, high, 2**63]),
            request_end("b", 0, 100, (16, 4), [top]),
        ],
    )
    a, b = read_sessions(trace)
    assert [t.hash_ids for t in a.turns] == [(top, high), (top, high, 2**63)] and b.turns[0].hash_ids == (top,)
    assert a.turns[1].reused_blocks == 2 and b.block_salt == a.block_salt == ""  # shared by the sessions
    words = [f"w{i}" for i in range(50)]
    assert block_words(top, words, 16, "s") == block_words(b.turns[0].hash_ids[0], words, 16, "s")
    assert block_words(top, words, 16, "s") != block_words(high, words, 16, "s")


def test_segments_are_read_in_segment_order_from_their_folder_and_prefix(tmp_path):
    folder = tmp_path / "traces"
    folder.mkdir()
    first = {segment: request_end(session, 0, 100, (20, 2), [1]) for segment, session in SEGMENTS}
    for segment, record in first.items():  # s0's second turn in a later segment
        later = [request_end("s0", 500, 100, (40, 2), [1, 2])] if segment == "000010" else []
        write(folder / f"run.{segment}.jsonl.gz", [envelope(line) for line in (record, *later)])
    write(folder / "extra.jsonl", [request_end("x", 0, 100, (20, 2), [1])])
    (folder / "notes.txt").write_text("not a trace")
    by_prefix = read_sessions(str(folder / "run"))
    assert [s.session_id for s in by_prefix] == ["s0", "s2", "s10", "s9", "sM"]  # by number, not by name
    (s0,) = (s for s in by_prefix if s.session_id == "s0")
    assert [(t.input_tokens, t.gap_s, t.reused_blocks) for t in s0.turns] == [(20, 0.0, 0), (40, 0.4, 1)]
    assert read_sessions(str(folder / "run.jsonl.gz")) == read_sessions(str(folder / "run.jsonl")) == by_prefix
    assert read_sessions(str(folder)) == [*read_sessions(str(folder / "extra.jsonl")), *by_prefix]
    assert [s.session_id for s in read_sessions(str(folder / "run.000002.jsonl.gz"))] == ["s2"]  # one, by content
    others = tmp_path / "others"  # a folder whose JSONL files are another format's: not a Dynamo trace
    others.mkdir()
    write(others / "turns.jsonl", [{"session_id": "s", "input_length": 9, "output_length": 2}])
    with pytest.raises(ValueError, match="a folder without .json traces"):
        read_sessions(str(others))


def test_the_sample_has_two_agents_one_with_a_joined_subagent():
    records = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    ends = [r["event"] for r in records if r.get("event", {}).get("event_type") == "request_end"]
    coder, review = read_sessions(str(SAMPLE))
    for session in (coder, review, *subagents(coder)):
        mine = [r["request"] for r in ends if r["agent_context"]["session_id"] == session.session_id]
        mine.sort(key=lambda request: request["request_received_ms"])
        assert [(t.input_tokens, t.output_tokens) for t in session.turns] == [
            (r["replay"]["input_length"], r["output_tokens"]) for r in mine
        ]
        assert all(200 <= t.input_tokens <= 900 and len(t.hash_ids) == t.input_tokens // 16 for t in session.turns)
        assert [t.reused_blocks for t in session.turns[1:]] == [len(t.hash_ids) for t in session.turns[:-1]]
        assert session.block_tokens == 16
    assert [len(t.fanout) for t in coder.turns] == [0, 0, 1, 0] and not any(t.fanout for t in review.turns)
    (explore,) = coder.turns[2].fanout
    assert (explore.session_id, explore.awaited, len(explore.turns)) == ("sess-coder-explore", True, 2)
    assert set(coder.turns[0].hash_ids[:10]) == set(review.turns[0].hash_ids[:10])  # the system prompt shared
    assert max(h for t in coder.turns for h in t.hash_ids) >= 2**63


def bad_lines(change) -> list[dict]:
    """Two sessions' request_end records (the second line a subagent's) after ``change(records)``."""
    records = [
        request_end("a", 0, 100, (32, 4), [1, 2]),
        request_end("b", 200, 100, (32, 4), [1, 3], parent_trajectory_id="a"),
        request_end("a", 500, 100, (48, 4), [1, 2, 4]),
    ]
    change(records)
    return records


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda r: r[1]["request"].pop("output_tokens"), ":2: not a Dynamo request_end (no 'output_tokens')"),
        (
            lambda r: r[2]["request"]["replay"].update(trace_block_size=32),
            ":3: trace_block_size 32, not {path}:1's 16 (one block size a trace)",
        ),
        (
            lambda r: r[1]["request"]["replay"].update(input_sequence_hashes=[1, U64]),
            ":2: not a Dynamo request_end (input_sequence_hashes must be a list of unsigned 64-bit whole numbers)",
        ),
        (
            lambda r: r[1]["request"]["replay"].pop("trace_block_size"),
            ":2: not a Dynamo request_end (no 'trace_block_size')",
        ),
        (
            lambda r: r[1]["request"].update(total_time_ms=-5),
            ":2: not a Dynamo request_end (total_time_ms must be ms of at least 0, not -5)",
        ),
        (
            lambda r: r[2].update(schema="dynamo.request.trace.v2"),
            ":3: schema 'dynamo.request.trace.v2', not " + SCHEMA,
        ),
        (
            lambda r: [record["agent_context"].update(parent_trajectory_id="b") for record in r[::2]],
            ":1: session 'a': its parents lead back to it",
        ),
        (lambda r: r.__setitem__(1, "{not json"), ":2: not a JSON trace"),
        (
            lambda r: r.__setitem__(slice(None), [tool_event("a", "tool_start", 0), request_end(None, 0, 9, (8, 1))]),
            ": no Dynamo request_end records with a session",
        ),
    ],
)
def test_a_bad_trace_is_one_line_naming_the_file_and_line(tmp_path, change, why):
    bad = write(tmp_path / "bad.jsonl", bad_lines(change))
    with pytest.raises(ValueError, match="^" + re.escape(bad + why.format(path=bad))) as raised:
        read_sessions(bad)
    assert "\n" not in str(raised.value)


def test_a_bad_trace_or_a_prefix_without_segments_stops_the_run(tmp_path):
    options = argparse.Namespace(trace="", trace_block_size=None, idle_gap_cap=None, session_start="")
    folder = tmp_path / "traces"
    folder.mkdir()
    write(folder / "run.000000.jsonl.gz", [{"uploader": "done"}])
    options.session_trace = str(folder / "run")
    with pytest.raises(StopTarget, match=rf"^--session-trace: {re.escape(str(folder))}/run: no Dynamo request_end"):
        check_session_trace(options)
    options.session_trace = str(folder / "other")
    with pytest.raises(StopTarget, match=r"^--session-trace: .*No such file or directory"):
        check_session_trace(options)
