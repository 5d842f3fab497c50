"""The user classes against the embedded simulator, through the real locust CLI."""

from __future__ import annotations

import pytest

from benchmarks.harness import read_rows, scrape, two_workers
from tests.helpers import NO_CANARIES, check_first_token_times, locust_stats, served_as_rows, server_completed
from vllm_stress.simulator.api.requestlog import read_request_log

SHORT = ["--input-tokens", "64", "--output-tokens", "16", "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]


def check_rows(rows: list[dict], name: str, prompt: int = 64, completion: int = 16) -> list[dict]:
    """Every finished row is a success with the exact token counts; returns those rows."""
    done = [r for r in rows if r["error"] != "Aborted"]  # in flight when the run stopped
    assert done, "no request finished"
    for r in done:
        assert (r["ok"], r["error"], r["name"], r["count_mismatch"]) == ("1", "", name, "0"), r
        assert int(r["completion_tokens"]) == completion and int(r["target_completion_tokens"]) == completion
        if r["prompt_tokens"]:
            assert int(r["prompt_tokens"]) == prompt == int(r["target_prompt_tokens"])
    return done


@pytest.mark.parametrize("locustfile,name", [("chat", "chat"), ("completions", "completions"), ("sdk", "sdk-chat")])
def test_one_streaming_user(run_locust, simulator, tmp_path, locustfile, name):
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        f"locustfiles/{locustfile}.py",
        "-H",
        sim.url,
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "4s",
        "--results-dir",
        str(out),
        "--csv",
        str(out / "locust"),
        *SHORT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    rows = check_rows(read_rows(out / "requests.csv"), name)
    for r in rows:
        assert 0 < float(r["ttft_s"]) <= float(r["e2e_s"])
        # TPOT as vLLM's benchmark defines it: the time after the first token over the 15 tokens after it
        assert float(r["tpot_s"]) * 15 == pytest.approx(float(r["e2e_s"]) - float(r["ttft_s"]), abs=1e-5)
        assert int(r["chunks"]) == 16 and r["finish_reason"] == "length" and r["users"] == "1"
    # chunks that arrive in one read share its timestamp: a client stalled longer than a whole 16-token answer (a
    # loaded machine) reads it at once (TTFT = e2e, TPOT 0); most answers are read as they stream
    spread = [r for r in rows if float(r["ttft_s"]) < float(r["e2e_s"]) and float(r["tpot_s"]) > 0]
    assert len(spread) >= len(rows) / 2, rows
    stats = locust_stats(out / "locust")
    assert int(stats[("POST", name)]["Request Count"]) == len(rows)
    assert int(stats[("TTFT", name)]["Request Count"]) == len(rows) == int(stats[("TPOT", name)]["Request Count"])
    assert float(stats[("POST", name)]["Average Content Size"]) == 16  # output tokens per request
    assert int(stats[("", "Aggregated")]["Request Count"]) == len(rows)  # TTFT/TPOT do not inflate the total


@pytest.mark.parametrize("locustfile,name", [("chat", "chat"), ("completions", "completions"), ("sdk", "sdk-chat")])
def test_non_streaming_users(run_locust, simulator, tmp_path, locustfile, name):
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        f"locustfiles/{locustfile}.py",
        "-H",
        sim.url,
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "3s",
        "--no-stream",
        "--results-dir",
        str(out),
        *SHORT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    for r in check_rows(read_rows(out / "requests.csv"), name):
        assert r["ttft_s"] == "" and r["tpot_s"] == "" and float(r["e2e_s"]) > 0


def test_legacy_generate_user(run_locust, simulator, tmp_path):
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/generate.py",
        "-H",
        sim.url,
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "3s",
        "--results-dir",
        str(out),
        *SHORT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [r for r in read_rows(out / "requests.csv") if r["error"] != "Aborted"]
    assert rows and all(r["ok"] == "1" and float(r["ttft_s"]) > 0 for r in rows)
    # no usage on this API: no token counts, and the streamed lines (merged when they pile up) are at most the tokens
    assert all(r["completion_tokens"] == "" and r["tpot_s"] == "" and 0 < int(r["chunks"]) <= 16 for r in rows)


def test_many_users_on_master_and_two_workers(run_locust, simulator, tmp_path):
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "-u",
        "40",
        "-r",
        "40",
        "-t",
        "6s",
        *two_workers(),
        "--results-dir",
        str(out),
        "--csv",
        str(out / "locust"),
        *SHORT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(out / "requests.csv")
    assert len({r["worker"] for r in rows}) == 2
    assert served_as_rows(server_completed(sim.url), rows)  # nothing lost, nothing counted twice
    done = check_rows(rows, "chat")
    assert {r["users"] for r in done} == {"40"}
    stats = locust_stats(out / "locust")
    assert int(stats[("POST", "chat")]["Request Count"]) == len(done)


def test_ttft_matches_the_servers_write_request_by_request(run_locust, simulator, tmp_path):
    """One request at a time, the client's TTFT is the server's own (first token written − request bytes received,
    its --request-log), request by request: the client's send is the server's kernel arrival within 2 ms, and its
    first-token time the server's first output write (tests.helpers.check_first_token_times: a server descheduled
    between its stamps widens the bracket, not the error). The engine's TTFT metric (from the request's submission
    to the engine, after the front end has read and tokenized it) is part of it. One output token: the write that
    carries it is the answer's only one with output."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--request-log", str(log))
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "3s",
        "--input-tokens",
        "2000",
        "--output-tokens",
        "1",
        "--headless",
        "--only-summary",
        "--results-dir",
        str(out),
        *NO_CANARIES,  # a canary's answer is longer: a late read could find its second chunk beside the first
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [r for r in read_rows(out / "requests.csv") if r["ok"] == "1"]
    metrics = scrape(sim.url)
    sim.stop()  # flushes the log
    records = read_request_log(str(log))
    assert int(metrics["vllm:time_to_first_token_seconds_count{}"]) >= len(rows) >= 3
    assert {row["completion_tokens"] for row in rows} == {"1"}
    check_first_token_times(rows, records)
    engine_ttft = (
        metrics["vllm:time_to_first_token_seconds_sum{}"] / metrics["vllm:time_to_first_token_seconds_count{}"]
    )
    assert engine_ttft < sum(float(r["ttft_s"]) for r in rows) / len(rows)
