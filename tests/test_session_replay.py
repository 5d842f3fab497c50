"""Replaying recorded agent sessions (--session-trace): the session-trace reader (JSONL and gzip, a bad line named),
the idle-gap cap, the per-level session figures from rows, and one replay against the simulator with prefix caching
checked on what the server recorded: its request log (lengths, gaps) and its prefix-cache counters."""

import argparse
import gzip
import json
import random
import shutil

import pandas as pd
import pytest
import requests

from benchmarks.harness import scrape
from tests.helpers import NO_CANARIES, REPO, locust_stats, served_as_rows, server_completed, small_run
from vllm_stress.analysis.cli import main as analyse
from vllm_stress.analysis.features.sessions import session_ends
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.levels import level_windows
from vllm_stress.analysis.measures import classify, ended_in_windows
from vllm_stress.client.checks import StopTarget, check_session_trace
from vllm_stress.client.sessiontrace import (
    SessionDeck,
    capped_gap,
    deck_for,
    parse_start_share,
    read_sessions,
    start_turn,
)
from vllm_stress.core import schema
from vllm_stress.core.csvrows import read_rows
from vllm_stress.core.schema import SESSION_PRIMER
from vllm_stress.master.accounting import RequestAccounting
from vllm_stress.master.livestats import LiveStats
from vllm_stress.master.promexport import RunSeries
from vllm_stress.master.rows import in_figures
from vllm_stress.simulator.api.requestlog import read_request_log

SAMPLE = REPO / "scenarios" / "data" / "agent-sessions-sample.jsonl"
BAILIAN = REPO / "scenarios" / "data" / "bailian-sample.jsonl"
BLOCK = 64  # the sample's block size (--trace-block-size)
CAP_S = 1.0
SYSTEM_BLOCKS = 3  # the blocks every session of the sample opens with (hash ids 1-3)


def test_the_sample_reads_the_same_from_jsonl_and_gzip(tmp_path):
    packed = tmp_path / "sessions.jsonl.gz"
    with open(SAMPLE, "rb") as plain, gzip.open(packed, "wb") as gz:
        shutil.copyfileobj(plain, gz)
    sessions = read_sessions(str(SAMPLE))
    assert read_sessions(str(packed)) == sessions
    assert [s.session_id for s in sessions] == [f"agent-{x}" for x in "abcdef"]
    assert [len(s.turns) for s in sessions] == [4, 5, 3, 6, 4, 5]
    a, b = sessions[0].turns, sessions[1].turns
    assert [t.gap_s for t in a] == [0.0, 45.0, 45.0, 0.4]  # from delay (ms)
    assert b[1].gap_s == pytest.approx(3.4)  # from timestamps (ms): the send-to-send difference
    assert a[0].reused_blocks == 0 and a[1].reused_blocks == 5  # turn 2 repeats turn 1's blocks but its last
    assert (a[1].input_tokens, a[1].output_tokens) == (501, 38)


def test_bailian_chats_are_sessions_of_their_first_chat(tmp_path):
    """A Bailian line's session is the first chat of its parent chain, its turns in time order, its gaps from
    timestamps in seconds, its blocks of 16 tokens; a chat whose parent the file lacks starts a session of it."""
    recorded = [json.loads(line) for line in BAILIAN.read_text().splitlines()]
    chains: dict[int, list[dict]] = {}
    first_of: dict[int, int] = {}
    for item in recorded:
        parent = item["parent_chat_id"]
        first_of[item["chat_id"]] = item["chat_id"] if parent == -1 else first_of[parent]
        chains.setdefault(first_of[item["chat_id"]], []).append(item)
    sessions = read_sessions(str(BAILIAN))
    assert [s.session_id for s in sessions] == [f"chat-{first}" for first in chains]
    for session, chain in zip(sessions, chains.values(), strict=True):
        assert session.block_tokens == 16
        assert [t.input_tokens for t in session.turns] == [item["input_length"] for item in chain]
        stamps = [item["timestamp"] for item in chain]
        gaps = [0.0] + [after - before for before, after in zip(stamps, stamps[1:], strict=False)]
        assert [t.gap_s for t in session.turns] == pytest.approx(gaps)
        assert all(t.reused_blocks > 0 for t in session.turns[1:])  # a follow-up repeats its parent's request
    orphan = '{"chat_id": 9, "parent_chat_id": 4, "timestamp": 1.5, "input_length": 40, "output_length": 5}'
    (tmp_path / "orphan.jsonl").write_text(orphan + "\n")
    assert read_sessions(str(tmp_path / "orphan.jsonl"))[0].session_id == "chat-4"


def test_a_bad_line_is_one_line_naming_the_file_and_line(tmp_path):
    lines = SAMPLE.read_text().splitlines()
    bad = tmp_path / "bad.jsonl.gz"
    with gzip.open(bad, "wt") as gz:
        gz.write("\n".join([*lines[:2], '{"session_id": "x", "input_length": "many"}', *lines[2:]]) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl\.gz:3: not a session-trace line") as raised:
        read_sessions(str(bad))
    assert "\n" not in str(raised.value)
    backwards = tmp_path / "backwards.jsonl"
    backwards.write_text(
        '{"session_id": 1, "input_length": 9, "output_length": 2, "timestamp": 500}\n'
        '{"session_id": 1, "input_length": 9, "output_length": 2, "timestamp": 100}\n'
    )
    with pytest.raises(ValueError, match=r"backwards\.jsonl:2: its timestamp is before"):
        read_sessions(str(backwards))


def test_the_options_are_checked_before_the_run(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"session_id": 1, "input_length": 9, "output_length": 2}\nnot json\n')
    options = argparse.Namespace(
        trace="", trace_block_size=64, idle_gap_cap=None, session_trace=str(bad), session_start=""
    )
    with pytest.raises(StopTarget, match=r"^--session-trace: .*bad\.jsonl:2: not a session-trace line"):
        check_session_trace(options)
    with pytest.raises(StopTarget, match="--idle-gap-cap must be at least 0 seconds, got -1"):
        check_session_trace(argparse.Namespace(**vars(options) | {"idle_gap_cap": -1.0}))
    with pytest.raises(StopTarget, match=r"^--session-start '0\.9,0\.1': 0 <= MIN <= MAX <= 1$"):
        check_session_trace(argparse.Namespace(**vars(options) | {"session_start": "0.9,0.1"}))
    with pytest.raises(StopTarget, match="--session-start: only with --session-trace"):
        check_session_trace(argparse.Namespace(**vars(options) | {"session_trace": "", "session_start": "0.5"}))
    check_session_trace(argparse.Namespace(**vars(options) | {"session_trace": str(SAMPLE), "idle_gap_cap": 0.0}))


def test_the_gap_cap_bounds_a_gap_and_the_deck_replays_in_passes():
    assert capped_gap(45.0, CAP_S) == CAP_S and capped_gap(0.4, CAP_S) == 0.4
    assert capped_gap(45.0, None) == 45.0 and capped_gap(3.0, 0.0) == 0.0
    sessions = read_sessions(str(SAMPLE))
    deck = SessionDeck(sessions[:2])
    dealt = [deck.deal() for _ in range(5)]
    assert [(s.session_id, replay) for s, replay in dealt] == [
        ("agent-a", 0),
        ("agent-b", 0),
        ("agent-a", 1),
        ("agent-b", 1),
        ("agent-a", 2),
    ]
    seeded = argparse.Namespace(session_seed=7)
    assert deck_for(seeded, sessions, 0).salt_of(1) == deck_for(seeded, sessions, 0).salt_of(1) != deck.salt_of(0)
    with pytest.raises(ValueError, match="2 sessions cannot give each of 3 workers one"):
        deck_for(argparse.Namespace(session_seed=None, worker=True, expect_workers=3), sessions[:2], 2)
    fresh = argparse.Namespace(session_seed=None)
    assert deck_for(fresh, sessions, 0).salt_of(0) != deck_for(fresh, sessions, 0).salt_of(0)  # a new one per run


def test_sessions_are_completed_truncated_failed_or_joined():
    rows = pd.DataFrame(
        {  # a completed in 2 turns; b cut mid-turn; c caught between turns by the stop; d ended by a failure; e joined
            # at turn 2 of 3 (--session-start) and answered to its end
            "session_id": ["a", "a", "b", "b", "c", "d", "e", "e"],
            "turn": [1, 2, 1, 2, 1, 1, 2, 3],
            "session_turns": [2, 2, 3, 3, 2, 2, 3, 3],
            "ok": [True, True, True, False, True, False, True, True],
            "error": ["", "", "", "Aborted", "", "HTTP 500", "", ""],
            "count_mismatch": [False] * 8,
            "finish_reason": ["length"] * 8,
            "start_time": [0.0, 2.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0],
            "end_time": [1.0, 3.5, 0.5, 9.0, 1.0, 0.2, 1.0, 3.0],
            "users": [2] * 8,
        }
    )
    ends = session_ends(classify(rows))
    assert ends.index.tolist() == ["a", "b", "c", "d", "e"] and ends["first_turn"].tolist() == [1, 1, 1, 1, 2]
    assert ends["completed"].tolist() == [True, False, False, False, False]
    assert ends["truncated"].tolist() == [False, True, True, False, False]
    assert ends["joined"].tolist() == [False, False, False, False, True]
    assert ends["answered"].tolist() == [2, 1, 1, 0, 2] and ends.loc["a", "latency_s"] == 3.5


@pytest.mark.parametrize("canaries_counted", [False, True])
def test_a_session_primer_is_in_no_live_figure_but_in_the_accounting(canaries_counted):
    """The master's one rule (rows.in_figures): a primer's row never counts in a live figure, whatever
    --canaries-in-figures says; nor is it a canary in the live view; the run's accounting counts it; the Prometheus
    export keeps it under its own name."""
    primer = request_row(name=SESSION_PRIMER, end_time=100.0, e2e_s=0.2, ttft_s=0.2, completion_tokens=1)
    turn = request_row(name="chat-session", session_id="agent-a/0", turn=3, end_time=101.0, e2e_s=0.5, ttft_s=0.1)
    assert not in_figures(primer, canaries_counted) and in_figures(turn, canaries_counted)
    stats = LiveStats(report_lag_s=0.0, canaries_in_figures=canaries_counted)
    stats.add([primer, turn])
    assert stats.latencies_by_level[4].requests == 1 and not stats.canaries_by_level
    assert dict(stats.tokens_by_second) == {101: 10} and len(stats.recent) == 1
    accounting = RequestAccounting()
    accounting.count([primer, turn])
    assert [accounting.totals[key] for key in ("requests", "primers", "engine_requests")] == [2, 1, 2]
    series = RunSeries(canaries_counted)
    series.add(primer)
    assert list(series.requests) == [(SESSION_PRIMER, "success", "")]


def test_the_analysis_keeps_a_session_primers_rows_apart(tmp_path):
    """load_run keeps the primers' rows apart (Run.primers), as the canaries' are: in no level figure, but in the
    run's accounting (Run.every_row: its rows, its errors)."""
    run = small_run(tmp_path / "run")
    rows = pd.read_csv(run / "requests.csv", dtype={"name": "string"})
    level = rows[rows["users"] == 5]
    primer = level.iloc[len(level) // 2 :][:1].assign(  # one failed primer in the middle of level 5's hold
        name=SESSION_PRIMER, ok=0, error="HTTP 500", status=500, finish_reason="", completion_tokens=1
    )
    pd.concat([rows, primer]).to_csv(run / "requests.csv", index=False, float_format="%.6f")
    loaded = load_run(run)
    assert (len(loaded.requests), len(loaded.primers), len(loaded.every_row)) == (len(rows), 1, len(rows) + 1)
    assert SESSION_PRIMER not in set(loaded.requests["name"])
    assert loaded.primers["error"].tolist() == ["HTTP 500"]
    assert analyse([str(run), "--out", str(tmp_path / "report")]) == 0
    summary = json.loads((tmp_path / "report" / "summary.json").read_text())
    windows, _ = level_windows(loaded)
    ended = ended_in_windows(classify(loaded.requests), windows)
    assert [level["requests"] for level in summary["levels"]] == ended.groupby("users").size().tolist()
    assert [level["failures"] for level in summary["levels"]] == [0, 0]  # the primer's failure in no level
    assert summary["errors"] == {"HTTP 500": 1}  # but in the run's


def test_a_start_share_is_parsed_and_a_joined_session_keeps_its_last_turn():
    assert parse_start_share("") is None and parse_start_share("0.5") == (0.5, 0.5)
    assert parse_start_share("0.25,0.75") == (0.25, 0.75)
    for bad in ("0.8,0.2", "1.5", "half"):
        with pytest.raises(ValueError, match="--session-start"):
            parse_start_share(bad)
    session = read_sessions(str(SAMPLE))[0]  # 4 turns
    rng = random.Random(0)
    assert {start_turn(session, (0.5, 0.5), rng) for _ in range(20)} == {2}
    assert {start_turn(session, (1.0, 1.0), rng) for _ in range(20)} == {3}  # its last turn is still sent
    assert {start_turn(session, (0.0, 0.75), rng) for _ in range(200)} == {0, 1, 2}


def test_recorded_sessions_replay_against_the_simulator(simulator, run_locust, tmp_path):
    log = tmp_path / "server.jsonl"
    sim = simulator("--enable-prompt-tokens-details", "--request-log", str(log))
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/session.py", "-H", sim.url, "-u", "2", "-r", "2", "-t", "10s"),
        *("--session-trace", str(SAMPLE), "--trace-block-size", str(BLOCK), "--idle-gap-cap", str(CAP_S)),
        *("--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = scrape(sim.url)
    sim.stop()  # its request log flushed
    served = read_request_log(str(log))
    rows = read_rows(out / "requests.csv")
    unseen = [row for row in rows if row["request_id"] not in served]  # cut by the stop before the server logged it
    assert set(served) <= {row["request_id"] for row in rows} and all(row["error"] == "Aborted" for row in unseen)

    recorded = {session.session_id: session.turns for session in read_sessions(str(SAMPLE))}
    by_session: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda row: int(row["turn"])):
        by_session.setdefault(row["session_id"], []).append(row)
    gaps = []
    for session_id, turns in by_session.items():
        recording = recorded[session_id.split("/")[0]]
        assert int(turns[0]["turn"]) == 1 and [int(t["turn"]) for t in turns] == list(range(1, len(turns) + 1))
        for row in turns:
            turn = recording[int(row["turn"]) - 1]
            if row["ok"] == "1":  # the server counted the recorded lengths
                server = served[row["request_id"]]
                assert (server["prompt_tokens"], server["completion_tokens"]) == (turn.input_tokens, turn.output_tokens)
        for before, after in zip(turns, turns[1:], strict=False):
            if after["request_id"] not in served:
                continue
            idle = served[after["request_id"]]["arrival"] - served[before["request_id"]]["end"]
            gaps.append((idle, capped_gap(recording[int(after["turn"]) - 1].gap_s, CAP_S)))
    assert any(wanted == CAP_S for _, wanted in gaps) and any(wanted < CAP_S for _, wanted in gaps)
    for idle, wanted in gaps:  # a recorded 45 s gap is waited 1 s; a 0.4 s one 0.4 s (wide margin up)
        assert wanted - 0.05 <= idle <= wanted + 2.0, gaps

    later = [row for row in rows if row["ok"] == "1" and int(row["turn"]) > 1]
    assert later and all(int(row["cached_tokens"]) >= BLOCK for row in later)  # their history was in the cache
    hits, queries = (
        sum(v for k, v in metrics.items() if k.startswith(f"vllm:prefix_cache_{n}_total")) for n in ("hits", "queries")
    )
    assert hits / queries > 0.4

    assert analyse([str(out), "--out", str(out / "report")]) == 0
    level = json.loads((out / "report" / "summary.json").read_text())["levels"][-1]
    cut = [
        turns for turns in by_session.values() if sum(t["ok"] == "1" for t in turns) < int(turns[0]["session_turns"])
    ]
    assert 1 <= level["sessions_truncated"] == len(cut) <= 2 and level["sessions_failed"] == 0
    assert level["sessions_completed_per_s"] > 0 and level["turns_per_session"] > 1
    assert level["trace_block_reuse"] > 0.3 and level["server_prefix_hit_rate"] > 0.3


def test_bailian_sessions_replay_with_their_16_token_blocks(simulator, run_locust, tmp_path):
    """Without --trace-block-size a Bailian session's turns are made of 16-token blocks: each follow-up finds its
    parent's request in the server's prefix cache (the blocks it repeats, less the parent's last one or two that
    its length and template cut), and nothing more."""
    sim = simulator("--block-size", "16", "--enable-prompt-tokens-details")
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/session.py", "-H", sim.url, "-u", "4", "-r", "4", "-t", "6s"),
        *("--session-trace", str(BAILIAN), "--idle-gap-cap", "0.2", "--session-seed", "1"),
        *("--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    recorded = {session.session_id: session.turns for session in read_sessions(str(BAILIAN))}
    later = [r for r in read_rows(out / "requests.csv") if r["ok"] == "1" and int(r["turn"]) > 1]
    assert len(later) >= 3
    for row in later:
        turn = recorded[row["session_id"].split("/")[0]][int(row["turn"]) - 1]
        repeated = 16 * turn.reused_blocks
        assert repeated - 32 <= int(row["cached_tokens"]) <= repeated + 16, (row["cached_tokens"], turn)


@pytest.mark.parametrize("primed", [True, False], ids=["primer", "no-primer"])
def test_each_users_first_session_joins_at_the_drawn_turn(primed, simulator, run_locust, tmp_path):
    """--session-start 0.5: each user's first session begins at its middle turn, sent whole (the server counts the
    recorded prompt); the report counts it joined, apart from the sessions replayed from their first turn. With the
    primer (the default) the user first sends the prompt of the last turn it skips, max_tokens 1: the joined turn
    finds the blocks they share in the server's prefix cache; the primer's row (session-primer, of no session) is in
    the server's count and the run's accounting, in no figure. --no-session-primer: the joined turn starts cold."""
    log = tmp_path / "server.jsonl"
    sim = simulator("--enable-prompt-tokens-details", "--request-log", str(log))
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/session.py", "-H", sim.url, "-u", "3", "-r", "3", "-t", "6s", "--session-start", "0.5"),
        *("--session-trace", str(SAMPLE), "--trace-block-size", str(BLOCK), "--idle-gap-cap", "0.1"),
        *("--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
        *("--csv", str(tmp_path / "locust"), *(() if primed else ("--no-session-primer",))),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    completed, overhead = server_completed(sim.url), chat_template_tokens(sim.url)
    sim.stop()  # its request log flushed
    served = read_request_log(str(log))
    recorded = {session.session_id: session.turns for session in read_sessions(str(SAMPLE))}
    rows = read_rows(out / "requests.csv")
    primers = [row for row in rows if row["name"] == SESSION_PRIMER]
    turns = [row for row in rows if row["name"] != SESSION_PRIMER]
    assert {row["name"] for row in turns} == {"chat-session"}
    first_rows: dict[str, dict] = {}
    for row in turns:
        if row["session_id"] not in first_rows or int(row["turn"]) < int(first_rows[row["session_id"]]["turn"]):
            first_rows[row["session_id"]] = row
        if row["ok"] == "1":
            turn = recorded[row["session_id"].split("/")[0]][int(row["turn"]) - 1]
            assert served[row["request_id"]]["prompt_tokens"] == turn.input_tokens
    joined = {session: row for session, row in first_rows.items() if int(row["turn"]) > 1}
    assert len(joined) == 3  # the three users' first sessions
    for session, row in joined.items():
        assert int(row["turn"]) == len(recorded[session.split("/")[0]]) // 2 + 1
        assert row["ok"] == "1"
    assert any(int(row["turn"]) == 1 for row in first_rows.values())  # the sessions after them start at their first
    assert served_as_rows(completed, rows)  # the server's count is every row's, the primers' included
    stats = locust_stats(tmp_path / "locust")  # Locust's table: the primers an entry of their own
    assert int(stats.get(("POST", SESSION_PRIMER), {}).get("Request Count", 0)) == len(primers)
    run = load_run(out)  # the analysis: the primers kept apart, in the accounting only
    assert (len(run.requests), len(run.primers), len(run.every_row)) == (len(turns), len(primers), len(rows))
    windows, _ = level_windows(run)
    ended = ended_in_windows(classify(run.requests), windows)
    assert analyse([str(out), "--out", str(out / "report")]) == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    levels = summary["levels"]
    assert sum(level["sessions_joined"] for level in levels) == 3  # a primed session is still joined
    assert [level["requests"] for level in levels] == [int((~ended["aborted"] & ~ended["cancelled"]).sum())]
    cached = {session: int(row["cached_tokens"]) for session, row in joined.items()}  # as the server reported
    if not primed:
        assert primers == []
        # cold: none of its history cached but the system prompt every session of the sample opens with (its hash
        # ids 1-3), which another user's turn may have sent already
        assert all(tokens <= SYSTEM_BLOCKS * BLOCK for tokens in cached.values()), cached
        return
    assert len(primers) == 3 and all(row["ok"] == "1" for row in primers), primers
    assert all(row["session_id"] == row["turn"] == "" for row in primers)  # in no session's figure
    by_prompt = {int(row["prompt_tokens"]): row for row in primers}  # the sample's joined sessions differ in it
    assert len(by_prompt) == 3
    for session, row in joined.items():
        skipped, joined_turn = recorded[session.split("/")[0]][int(row["turn"]) - 2 : int(row["turn"])]
        primer = by_prompt[skipped.input_tokens]  # the last skipped turn's recorded prompt, as the server counted it
        assert served[primer["request_id"]]["prompt_tokens"] == skipped.input_tokens
        assert int(primer["completion_tokens"]) == served[primer["request_id"]]["completion_tokens"] == 1
        assert primer["worker"] == row["worker"] and float(primer["end_time"]) <= float(row["start_time"])
        # the joined turn finds cached at least the whole blocks its prompt shares with the primer's
        common = next(
            (n for n, (a, b) in enumerate(zip(skipped.hash_ids, joined_turn.hash_ids, strict=False)) if a != b),
            min(len(skipped.hash_ids), len(joined_turn.hash_ids)),
        )
        whole = min(common, (skipped.input_tokens - overhead) // BLOCK)  # the primer's last block may be cut short
        assert cached[session] >= whole * BLOCK, (session, cached[session], whole)
    assert sum(cached.values()) > 3 * SYSTEM_BLOCKS * BLOCK  # more than a cold start could find


def chat_template_tokens(url: str) -> int:
    """The tokens the server's chat template adds to a prompt's words (an empty user message's count)."""
    body = {"messages": [{"role": "user", "content": ""}], "add_generation_prompt": True}
    return int(requests.post(url + "/tokenize", json=body, timeout=10).json()["count"])


def request_row(**fields) -> list:
    """A requests.csv row as the master holds it (a list in REQUEST_COLUMNS order): a success of level 4."""
    success = {"ok": 1, "count_mismatch": 0, "users": 4, "finish_reason": "length", "tpot_s": 0.01}
    values = dict.fromkeys(schema.REQUEST_COLUMNS, "") | success | {"completion_tokens": 10} | fields
    return [values[column] for column in schema.REQUEST_COLUMNS]
