"""Multi-turn chat sessions (locustfiles/session.py) against the simulator: each turn carries the history with the
server's answers, the prefix cache serves that history (the hit rate from the rows agrees with the server's own
counters, and turn 4's TTFT drops), and the per-turn and per-session tables report it; ShareGPT conversations."""

import json
import random
import sys
import time

import numpy as np
import pandas as pd
import pytest

from benchmarks.harness import read_rows, scrape, two_workers
from tests.helpers import NO_CANARIES, REPO
from vllm_stress.analysis.cli import main as analyse
from vllm_stress.analysis.features.traces import session_summary, turn_table, window_table
from vllm_stress.analysis.measures import classify
from vllm_stress.client.conversation import think_time
from vllm_stress.client.prompts import load_dataset
from vllm_stress.client.sharegpt import read_conversations

SHAREGPT = REPO / "scenarios" / "data" / "sharegpt-sample.json"
QUIET = ["--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]
# a 1,024-token first turn, then 128 new tokens a turn: turn 4 is about 1,500 tokens, of which the history (all but
# the last answer's tail block and the new message) is in the prefix cache when caching is on
SESSION = [
    "--input-tokens",
    "1024",
    "--output-tokens",
    "16",
    "--turns",
    "4",
    "--turn-tokens",
    "128",
    "--think-time",
    "0.05",
    "--think-dist",
    "constant",
]


def test_sharegpt_gives_first_turns_to_the_chat_user_and_conversations_to_the_session_user(tmp_path):
    conversations = read_conversations(str(SHAREGPT))
    assert len(conversations) == 40 and all(2 <= len(turns) <= 6 for turns in conversations)
    first_turns = [turns[0] for turns in conversations]
    assert [spec.text for spec in load_dataset(str(SHAREGPT))] == first_turns
    jsonl = tmp_path / "chats.jsonl"  # the same items one a line
    jsonl.write_text("".join(json.dumps(item) + "\n" for item in json.loads(SHAREGPT.read_text())))
    assert read_conversations(str(jsonl)) == conversations
    parquet = sharegpt_parquet(tmp_path)  # the Hub's format: a conversations column of lists of structs
    assert read_conversations(parquet) == conversations and [s.text for s in load_dataset(parquet)] == first_turns
    bad = tmp_path / "bad.json"
    bad.write_text('[{"conversations": [{"from": "human"}]}]')
    with pytest.raises(ValueError, match="item 1: not a ShareGPT conversation"):
        read_conversations(str(bad))


def sharegpt_parquet(folder) -> str:
    """The ShareGPT sample as a Parquet file, as a dataset of the Hugging Face Hub comes."""
    path = folder / "sharegpt.parquet"
    pd.DataFrame(json.loads(SHAREGPT.read_text())).to_parquet(path)
    return str(path)


def test_think_times_follow_their_distribution_and_seed():
    draws = {dist: [think_time(random.Random(7), 2.0, dist) for _ in range(3)] for dist in ("constant", "exponential")}
    assert draws["constant"] == [2.0] * 3
    rng = random.Random(7)
    exponential = [think_time(rng, 2.0, "exponential") for _ in range(4000)]
    uniform = [think_time(rng, 2.0, "uniform") for _ in range(4000)]
    assert np.mean(exponential) == pytest.approx(2.0, rel=0.1) and np.mean(uniform) == pytest.approx(2.0, rel=0.1)
    assert max(uniform) <= 4.0 and think_time(rng, 0.0, "exponential") == 0.0
    again = random.Random(7)
    assert think_time(again, 2.0, "exponential") == think_time(random.Random(7), 2.0, "exponential")


def test_turn_session_and_window_tables_from_rows():
    rows = pd.DataFrame(
        {
            "start_time": [0.0, 1.0, 2.0, 0.5, 1.5, 12.0],
            "end_time": [0.5, 1.5, 2.5, 1.0, 2.0, 12.5],
            "ttft_s": [0.2, 0.1, np.nan, 0.3, 0.1, 0.2],
            "e2e_s": [0.5] * 6,
            "ok": [True, True, False, True, True, True],
            "error": ["", "", "HTTP 500", "", "", ""],
            "count_mismatch": [False] * 6,
            "finish_reason": ["length"] * 6,
            "prompt_tokens": [100, 200, np.nan, 100, 200, 100],
            "target_prompt_tokens": [100, 200, 300, 100, 200, 100],
            "completion_tokens": [10, 10, np.nan, 10, 10, 10],
            "chunks": [10, 10, 0, 10, 10, 10],
            "cached_tokens": [0, 150, np.nan, 0, 100, 0],
            "session_id": ["a", "a", "a", "b", "b", "c"],
            "turn": [1, 2, 3, 1, 2, 1],
            "schedule_lag_s": [0.0, 0.1, 0.2, 0.0, 2.0, 0.0],
            "users": [2] * 6,
        }
    )
    rows["session_id"] = rows["session_id"].astype("string")
    rows = classify(rows)
    turns = {t["turn"]: t for t in turn_table(rows)}
    assert turns[2]["requests"] == 2 and turns[2]["prefix_hit_rate"] == pytest.approx(250 / 400)
    assert turns[3]["failures"] == 1 and turns[1]["ttft_p50_s"] == pytest.approx(0.2)
    sessions = session_summary(rows)
    assert (
        sessions["sessions"] == 3 and sessions["turns_completed"] == {1: 1, 2: 2} and sessions["ended_by_failure"] == 1
    )
    windows = window_table(rows, 10.0)
    assert [w["requests"] for w in windows] == [5, 1] and windows[0]["behind"] and not windows[1]["behind"]
    assert windows[0]["schedule_lag_max_s"] == 2.0


def session_run(simulator, run_locust, tmp_path, name, *args, sim_args=(), users=4, seconds=8):
    """A session run on a fresh simulator: its rows, its report's traffic tables, and the server's counters."""
    sim = simulator("--enable-prompt-tokens-details", *sim_args)
    out = tmp_path / name
    proc = run_locust(
        "-f",
        "locustfiles/session.py",
        "-H",
        sim.url,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{seconds}s",
        "--stop-timeout",
        "20",
        "--results-dir",
        str(out),
        *SESSION,
        *QUIET,
        *args,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert analyse([str(out), "--out", str(out / "report")]) == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    metrics = scrape(sim.url)
    counters = {
        name: sum(v for k, v in metrics.items() if k.startswith(f"vllm:prefix_cache_{name}_total{{"))
        for name in ("hits", "queries")
    }
    return read_rows(out / "requests.csv"), summary["traffic"][0], counters


def test_prefix_caching_serves_the_history_and_turn_4_gets_faster(simulator, run_locust, tmp_path):
    rows, cached, server = session_run(simulator, run_locust, tmp_path, "cached")  # some 45 conversations of 0.7 s
    _, uncached, server_off = session_run(
        simulator, run_locust, tmp_path, "uncached", sim_args=["--no-enable-prefix-caching"]
    )
    ok = [r for r in rows if r["ok"] == "1"]
    assert {r["turn"] for r in ok} == {"1", "2", "3", "4"} and all(r["session_id"] for r in rows)
    assert all(r["count_mismatch"] == "0" for r in ok)  # every turn's length check held, the history's included
    assert all(int(r["cached_tokens"]) == 0 for r in ok if r["turn"] == "1")  # random first turns: nothing shared
    # the token-weighted hit rate of the rows (all of them: the stop lets the last turns finish) is the server's
    rows_hit_rate = sum(int(r["cached_tokens"]) for r in ok) / sum(int(r["prompt_tokens"]) for r in ok)
    assert rows_hit_rate == pytest.approx(server["hits"] / server["queries"], abs=0.05)
    turns = {t["turn"]: t for t in cached["turns"]}
    assert turns[4]["prefix_hit_rate"] > 0.8 and turns[4]["prompt_tokens_mean"] > 1400
    off = {t["turn"]: t for t in uncached["turns"]}
    assert server_off["hits"] == 0 and all(t["prefix_hit_rate"] == 0 for t in off.values())
    assert turns[4]["ttft_p50_s"] < 0.6 * off[4]["ttft_p50_s"]  # the cached history is not prefilled again
    assert off[4]["ttft_p50_s"] > off[1]["ttft_p50_s"]  # without the cache, the longer history costs more
    assert cached["sessions"]["turns_completed"].get("4", 0) >= 4  # whole conversations, then new ones


def test_non_streaming_sessions_from_a_parquet_sharegpt_on_two_workers_carry_the_answers(
    simulator, run_locust, tmp_path
):
    rows, traffic, server = session_run(
        simulator,
        run_locust,
        tmp_path,
        "sharegpt",
        "--no-stream",
        "--dataset",
        sharegpt_parquet(tmp_path),
        "--session-seed",
        "3",
        *two_workers(),
        users=4,
        seconds=10,
    )
    ok = [r for r in rows if r["ok"] == "1"]
    workers = {r["worker"] for r in rows}
    assert len(workers) == 2 and all(r["session_id"].startswith(r["worker"] + "-") for r in rows)
    assert ok and all(r["count_mismatch"] == "0" and r["target_prompt_tokens"] for r in ok)
    by_session = {}
    for r in ok:
        by_session.setdefault(r["session_id"], []).append(int(r["prompt_tokens"]))
    # each turn's prompt holds the previous one and its answer (16 tokens): it grows by more than the answer
    assert all(b - a > 16 for tokens in by_session.values() for a, b in zip(tokens, tokens[1:], strict=False))
    assert traffic["turns"][0]["requests"] >= 2 and traffic["sessions"]["sessions"] >= 2
    assert server["hits"] > 0  # later turns found their history in the cache


def test_a_failed_turn_ends_its_session_and_every_request_names_its_session(run_locust, fault_server, tmp_path):
    """Turns 1 and 2 answered, turn 3 fails (HTTP 503): the row says so, the conversation ends and a new one starts
    at turn 1; the server saw each request's session in the sticky header."""
    prefix = "/cycle/ok,ok,http503"
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/session.py",
        "-H",
        fault_server.url + prefix,
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "4s",
        "--stop-timeout",
        "10",
        "--input-tokens",
        "20",
        "--output-tokens",
        "4",
        "--turn-tokens",
        "5",
        "--think-time",
        "0",
        "--results-dir",
        str(out),
        *QUIET,
        *NO_CANARIES,  # the fault server's cycle is of the conversation's requests
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # Locust's exit code for a run with failed requests
    rows = read_rows(out / "requests.csv")
    assert len(rows) >= 6
    assert [(r["turn"], r["error"]) for r in rows[:6]] == [("1", ""), ("2", ""), ("3", "HTTP 503")] * 2
    assert all(r["count_mismatch"] == "0" for r in rows if r["ok"] == "1")  # the answers are in the history
    assert [int(r["prompt_tokens"]) for r in rows[:2]] == [20, 20 + 4 + 5]
    sent = [headers.get("X-Session-Id", "") for headers in fault_server.headers[prefix][: len(rows)]]
    assert sent == [r["session_id"] for r in rows]
    assert len({r["session_id"] for r in rows[:6]}) == 2


def served(url: str, handler: str) -> float:
    """Requests to ``handler`` the server has finished, by its own counter (vLLM's http_requests_total)."""
    return sum(v for k, v in scrape(url).items() if k.startswith(f"http_requests_total{{handler={handler},"))


@pytest.mark.parametrize("source", ["words", "sharegpt"])
def test_sessions_send_the_server_nothing_but_their_turns_and_still_size_each_turn_exactly(
    simulator, processes, tmp_path, source
):
    """Turns are sized before the run (/tokenize at test start) and from the previous turn's usage: once the first
    turn has been answered the server sees no /tokenize, and every turn's prompt is the size the user announced
    (target_prompt_tokens = the server's usage.prompt_tokens), after answers that ended on EOS too."""
    sim = simulator("--profile", "cpu-tiny", "--set", "output_len_mean=8", "--set", "t_fixed=0.005")
    out = tmp_path / source
    dataset = ["--dataset", str(SHAREGPT), "--session-seed", "5"] if source == "sharegpt" else []
    args = ["-f", "locustfiles/session.py", "-H", sim.url, "-u", "3", "-r", "3", "-t", "8s", "--stop-timeout", "20"]
    args += ["--results-dir", str(out), *SESSION, "--turns", "3", "--no-ignore-eos", *dataset, *QUIET]
    log = tmp_path / f"{source}.log"
    locust = processes([sys.executable, "-m", "locust", *args], log)
    deadline = time.monotonic() + 60
    while served(sim.url, "/v1/chat/completions") < 1:  # the first turn answered
        assert locust.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.05)
    sized = served(sim.url, "/tokenize")
    assert locust.wait(timeout=90) == 0, log.read_text()[-3000:]
    assert sized > 0 and served(sim.url, "/tokenize") == sized  # none during the run
    ok = [r for r in read_rows(out / "requests.csv") if r["ok"] == "1"]
    later = [r for r in ok if r["turn"] != "1"]
    assert len(later) >= 3 and all(r["target_prompt_tokens"] == r["prompt_tokens"] for r in ok)
    sessions = {}
    for r in ok:
        sessions.setdefault(r["session_id"], {})[int(r["turn"])] = r
    # a turn after an answer that stopped on EOS (its EOS token is in completion_tokens but not in the text)
    assert any(turns[n]["finish_reason"] == "stop" and n + 1 in turns for turns in sessions.values() for n in turns)
