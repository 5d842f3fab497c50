"""The suite against a real vLLM (CPU build, tiny local model), started once by deploy/real-vllm.sh.

bash deploy/real-vllm.sh model          # once: venv + model (about 3 min the first time)
.venv/bin/python -m pytest tests/test_realvllm.py -m realvllm
"""

from __future__ import annotations

import argparse
import json
import os

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from benchmarks.harness import read_rows, scrape
from tests.helpers import (
    NO_CANARIES,
    REPO,
    Server,
    analyse,
    counters,
    delta,
    locust_stats,
    run_user,
    server_completed,
    wait_until,
)
from tests.shapes import AS_REAL_VLLM, FIXTURE, capture_shapes, differences, dump_shapes, simulator_differences
from vllm_stress.analysis.io.load import load_run
from vllm_stress.client.prompts import WORDS
from vllm_stress.core.schema import CLIENT_LOOP_LAG_LIMIT_MS, SERVER_SOURCE_COUNTERS

pytestmark = pytest.mark.timeout(600)  # the real_vllm fixture marks the tests realvllm

SHORT = ["--input-tokens", "64", "--output-tokens", "16", "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]
USERS = [("chat", "chat"), ("completions", "completions"), ("sdk", "sdk-chat")]
# Families of the reference (docs/concepts/vllm-protocol.md §8.1), as prometheus_client names them.
METRIC_TYPES = {
    "vllm:num_requests_running": "gauge",
    "vllm:num_requests_waiting": "gauge",
    "vllm:kv_cache_usage_perc": "gauge",
    "vllm:prompt_tokens": "counter",
    "vllm:generation_tokens": "counter",
    "vllm:request_success": "counter",
    "vllm:num_preemptions": "counter",
    "vllm:time_to_first_token_seconds": "histogram",
    "vllm:inter_token_latency_seconds": "histogram",
    "vllm:e2e_request_latency_seconds": "histogram",
    "vllm:request_queue_time_seconds": "histogram",
    "vllm:request_prompt_tokens": "histogram",
    "vllm:request_generation_tokens": "histogram",
    "vllm:iteration_tokens_total": "histogram",
}


@pytest.fixture(scope="module")
def vllm_shapes(real_vllm):
    return capture_shapes(real_vllm.url, real_vllm.model)


def tokenize(server: Server, **body) -> int:
    resp = requests.post(server.url + "/tokenize", json={"model": server.model} | body, timeout=10)
    resp.raise_for_status()
    return resp.json()["count"]


def check_rows(rows: list[dict], name: str, prompt: int = 64, completion: int = 16) -> None:
    """Every row a success, sized exactly (/tokenize) and forced to its output length (ignore_eos)."""
    assert rows, "no request finished"
    for r in rows:
        assert (r["ok"], r["error"], r["name"], r["count_mismatch"], r["status"]) == ("1", "", name, "0", "200"), r
        assert int(r["prompt_tokens"]) == int(r["target_prompt_tokens"]) == prompt, r
        assert int(r["completion_tokens"]) == int(r["target_completion_tokens"]) == completion, r
        assert r["finish_reason"] == "length", r


def test_every_row_is_joined_to_vllms_own_span(run_locust, real_vllm, tmp_path):
    """vLLM exports a span per request (--otlp-traces-endpoint, OTLP/HTTP) that continues the row's traceparent: every
    successful row of a short run gets vLLM's own queue, TTFT and prefill, and its TTFT holds vLLM's. First in the
    module: later, the server's exporter is still retrying the spans of earlier tests' requests, which no receiver
    took, and holds this run's behind them past its end."""
    out = tmp_path / "run"
    rows = run_user(run_locust, real_vllm, out, "chat", "--otlp-port", str(real_vllm.otlp_port), *SHORT)
    check_rows(rows, "chat")
    run = load_run(out)
    viewed = run.requests[run.requests["ok"]]
    assert len(viewed) == len(rows) and viewed["server_ttft_s"].notna().all(), viewed.isna().sum()
    # every OTLP body the receiver took was well formed
    assert run.meta["span_receiver"]["rejected"] == 0
    assert (viewed["server_queue_s"] >= 0).all() and (viewed["server_prefill_s"] > 0).all()
    assert (viewed["server_queue_s"] + viewed["server_prefill_s"] <= viewed["server_ttft_s"] + 1e-3).all()
    assert (viewed["ttft_s"] > viewed["server_ttft_s"]).all()


def test_each_prompt_word_is_one_token(real_vllm):
    text = " ".join(WORDS)
    assert tokenize(real_vllm, prompt=text) == len(WORDS)
    empty = tokenize(real_vllm, messages=[{"role": "user", "content": ""}], add_generation_prompt=True)
    assert tokenize(real_vllm, messages=[{"role": "user", "content": text}], add_generation_prompt=True) == empty + len(
        WORDS
    )


@pytest.mark.parametrize("locustfile,name", USERS)
def test_streaming_user(run_locust, real_vllm, tmp_path, locustfile, name):
    before = counters(real_vllm.url)
    out = tmp_path / "run"
    rows = run_user(run_locust, real_vllm, out, locustfile, "--csv", str(out / "locust"), *SHORT)
    check_rows(rows, name)
    for r in rows:
        # a read's chunks share its timestamp (vllm_stress/client/stream.py): the tiny CPU model can send a whole 16-token
        # answer within one read, so TTFT may equal e2e and TPOT be 0, never more or less
        assert 0 < float(r["ttft_s"]) <= float(r["e2e_s"]) and float(r["tpot_s"]) >= 0, r
        # one chunk per token (partial UTF-8 ones too), fewer when vLLM's frontend lags and merges two outputs
        assert 0 < int(r["chunks"]) <= 16, r
    assert delta(before, counters(real_vllm.url)) == {
        "vllm:request_success_total{finished_reason=length}": len(rows),
        "vllm:prompt_tokens_total{}": 64 * len(rows),
        "vllm:generation_tokens_total{}": 16 * len(rows),
        "vllm:time_to_first_token_seconds_count{}": len(rows),
    }
    stats = locust_stats(out / "locust")
    assert int(stats[("POST", name)]["Request Count"]) == len(rows) == int(stats[("TTFT", name)]["Request Count"])


@pytest.mark.parametrize("locustfile,name", USERS)
def test_non_streaming_user(run_locust, real_vllm, tmp_path, locustfile, name):
    before = server_completed(real_vllm.url)
    rows = run_user(run_locust, real_vllm, tmp_path / "run", locustfile, "--no-stream", *SHORT)
    check_rows(rows, name)
    assert all(r["ttft_s"] == "" and float(r["e2e_s"]) > 0 for r in rows)
    assert server_completed(real_vllm.url) - before == len(rows)


def test_cancelled_streams_free_their_slots_and_vllm_counts_none(run_locust, real_vllm, tmp_path):
    """Every stream cut by the client at its 4th chunk of a 2,000-token answer (--cancel-share 1): vLLM aborts each
    (docs/guides/stress.md): its running gauge falls back to 0 and its generation counter stops for each request long
    before its answer's end; and, as vLLM 0.32 counts no client abort, no finished request is counted."""
    before = counters(real_vllm.url)
    quiet = ["--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES]
    sizes = ["--input-tokens", "64", "--output-tokens", "2000"]
    rows = run_user(
        run_locust,
        real_vllm,
        tmp_path / "run",
        "chat",
        *quiet,
        *sizes,
        "--cancel-share",
        "1",
        "--cancel-after",
        "4tokens",
    )
    assert len(rows) >= 2 and all((r["error"], r["chunks"]) == ("Cancelled", "4") for r in rows), rows
    assert wait_until(lambda: scrape(real_vllm.url)["vllm:num_requests_running{}"] == 0, timeout=30)
    changed = delta(before, counters(real_vllm.url))
    assert not [key for key in changed if key.startswith("vllm:request_success_total")], changed
    assert changed["vllm:prompt_tokens_total{}"] == 64 * len(rows)  # each was admitted and prefilled
    assert 4 * len(rows) <= changed["vllm:generation_tokens_total{}"] < 1000 * len(rows), changed


@pytest.mark.parametrize("locustfile", ["responses", "messages"])
def test_responses_and_messages_users(run_locust, real_vllm, tmp_path, locustfile):
    """vLLM's own Responses and Messages APIs (docs/guides/endpoints.md): prompts sized exactly, every count the
    server's; the Responses output forced to 16 tokens, the Messages output at most 16: its API takes no ignore_eos,
    so the test model may stop at once, an answer without text the suite fails as NoOutput (no first token to time)."""
    before = counters(real_vllm.url)
    may_fail = ["--exit-code-on-error", "0"] if locustfile == "messages" else []
    rows = run_user(run_locust, real_vllm, tmp_path / "run", locustfile, *SHORT, *may_fail)
    assert rows, "no request finished"
    for r in rows:
        if r["error"] == "NoOutput":  # the model stopped before any text, counted by the server all the same (its
            # tokens before the stop may have no text: special tokens the detokenizer leaves out)
            assert (locustfile, r["finish_reason"], r["ttft_s"]) == ("messages", "stop", ""), r
            assert int(r["prompt_tokens"]) == 64 and int(r["completion_tokens"]) < 16, r
            continue
        assert (r["ok"], r["error"], r["name"], r["count_mismatch"]) == ("1", "", locustfile, "0"), r
        assert r["endpoint"] == f"/v1/{locustfile}" and int(r["prompt_tokens"]) == 64, r
        assert 0 < int(r["completion_tokens"]) <= 16 and 0 < float(r["ttft_s"]) <= float(r["e2e_s"]), r
        if locustfile == "responses":
            assert (r["completion_tokens"], r["finish_reason"]) == ("16", "length"), r
    assert sum(r["error"] == "NoOutput" for r in rows) < len(rows) / 2, rows  # a stop at once is the exception
    changed = delta(before, counters(real_vllm.url))
    assert changed["vllm:prompt_tokens_total{}"] == 64 * len(rows)
    assert changed["vllm:generation_tokens_total{}"] == sum(int(r["completion_tokens"]) for r in rows)
    (level,) = analyse(tmp_path / "run", tmp_path / "report")["levels"]  # its report, from the rows the server counted
    assert level["requests"] > 0 and level["output_tokens_per_s"] > 0, level


@pytest.mark.parametrize("locustfile,args", [("chat", []), ("completions", ["--no-stream"]), ("sdk", [])])
def test_prompt_too_long_fails_as_http_400(run_locust, real_vllm, tmp_path, locustfile, args):
    """A dataset prompt over max_model_len (the option check cannot see it): every request fails with vLLM's 400."""
    dataset = tmp_path / "long.jsonl"
    dataset.write_text(json.dumps({"prompt": " ".join(["the"] * 5000)}) + "\n")
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        f"locustfiles/{locustfile}.py",
        "-H",
        real_vllm.url,
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "2s",
        "--stop-timeout",
        "10",
        "--results-dir",
        str(out),
        "--dataset",
        str(dataset),
        *SHORT,
        *args,
    )
    assert proc.returncode == 1, proc.stderr[-3000:]  # Locust's exit code when requests failed
    rows = read_rows(out / "requests.csv")
    assert rows and {(r["ok"], r["error"], r["status"]) for r in rows} == {("0", "HTTP 400", "400")}


def test_unknown_model_is_refused_before_the_load(run_locust, real_vllm, tmp_path):
    """vLLM answers an unknown model with 404 (tests/fixtures/vllm_shapes.json); the locustfiles check first."""
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        real_vllm.url,
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "2s",
        "--results-dir",
        str(out),
        "--model",
        "no-such-model",
        *SHORT,
    )
    assert proc.returncode == 2 and f"(it serves: {real_vllm.model})" in proc.stderr, proc.stderr[-3000:]
    assert read_rows(out / "requests.csv") == []


def test_metric_names_and_types(real_vllm):
    families = {f.name: f for f in text_string_to_metric_families(requests.get(real_vllm.url + "/metrics").text)}
    assert {name: families[name].type for name in METRIC_TYPES if name in families} == METRIC_TYPES
    assert "vllm:gpu_cache_usage_perc" not in families
    for name in METRIC_TYPES:
        for sample in families[name].samples:
            assert sample.labels["engine"] == "0" and sample.labels["model_name"] == real_vllm.model, sample


def test_smoke_scenario_through_master_and_workers(scenarios, real_vllm, tmp_path):
    before = counters(real_vllm.url)
    out = tmp_path / "smoke"
    args = [
        "run",
        "--scenario",
        "smoke",
        "--target",
        real_vllm.url,
        "--out",
        str(out),
        "--workers",
        "2",
        "--locust-arg=--reset-prefix-cache",
    ]
    assert scenarios(args) == 0
    resets = json.loads((out / "run-1" / "run.json").read_text())["prefix_cache_resets"]  # as each level began
    assert [(reset["users"], reset["reset"]) for reset in resets] == [(2, True), (4, True)], resets
    rows = read_rows(out / "run-1" / "requests.csv")
    assert len({r["worker"] for r in rows}) == 2
    done = [r for r in rows if r["error"] != "Aborted"]
    assert len(rows) - len(done) <= 4  # in flight when the last level (4 users) ended
    check_rows([r for r in done if not r["canary"]], "chat", prompt=128, completion=32)  # canaries: their own size
    assert {r["users"] for r in done} == {"2", "4"}
    finished = sum(  # canaries may stop before their max_tokens: every finish reason
        value for key, value in delta(before, counters(real_vllm.url)).items() if key.startswith("vllm:request_success")
    )
    # nothing lost between the workers and the master, nothing counted twice; a stream the stop cut may have had its
    # last token already sent (the server finished it) before its reader got to it
    assert len(done) <= finished <= len(rows)
    summary = json.loads((out / "report" / "summary.json").read_text())
    levels = {level["users"]: level for level in summary["levels"]}
    assert sorted(levels) == [2, 4]
    assert {level["users"] for level in summary["canaries"]} == {2, 4}  # canaries on by default, compared per level
    for level in levels.values():
        assert level["requests"] > 0 and level["failures"] == 0 and level["output_tokens_per_s"] > 0, level
    cache = json.loads((out / "run-1" / "run.json").read_text())["server_cache_config"]  # vllm:cache_config_info
    assert cache["block_size"] > 0 and cache["num_gpu_blocks"] > 0, cache
    kv = summary["kv_cache"]
    assert kv["sequences"] == (cache["num_gpu_blocks"] - 1) // -(-(128 + 32) // cache["block_size"]), kv


def test_live_vllm_matches_the_fixture(vllm_shapes):
    """tests/fixtures/vllm_shapes.json is what this vLLM answers; VLLM_SHAPES_UPDATE=1 rewrites it."""
    if os.environ.get("VLLM_SHAPES_UPDATE") == "1":
        FIXTURE.write_text(dump_shapes(vllm_shapes))
    found = differences(json.loads(FIXTURE.read_text()), vllm_shapes)
    assert not found, "\n".join(found)


def test_simulator_matches_live_vllm(vllm_shapes, simulator):
    sim = simulator(*AS_REAL_VLLM)
    found = simulator_differences(vllm_shapes, sim.url, sim.model)
    assert not found, "\n".join(found)


def test_parallel_questions_complete_and_are_graded(scenarios, real_vllm, tmp_path):
    """`python -m scenarios parallel` against vLLM: a random model cannot answer, so only check that every question
    at every level got a reply and a grade."""
    out = tmp_path / "parallel"
    args = [
        "parallel",
        "--target",
        real_vllm.url,
        "--dataset",
        str(REPO / "scenarios" / "data" / "synthetic-mc.jsonl"),
        "--limit",
        "8",
        "--parallel",
        "1,4",
        "--out",
        str(out),
    ]
    assert scenarios(args) == 0
    rows = read_rows(out / "answers.csv")
    assert sorted((r["parallel"], r["question_id"]) for r in rows) == sorted(
        (p, f"syn-mc-{i:03d}") for p in ("1", "4") for i in range(1, 9)
    )
    assert all(
        r["error"] == "" and r["finish_reason"] in ("stop", "length") and r["correct"] in ("True", "False")
        for r in rows
    )
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model"] == real_vllm.model and not summary["simulated"]
    assert summary["datasets"]["synthetic-mc"]["agreement"]["questions"] == 8


def test_what_held_requests_back_is_measured_not_guessed(scenarios, real_vllm, tmp_path):
    """No gateway stands between the suite and this vLLM, yet its HTTP layer held fewer requests than the users
    sent (a CPU vLLM's engine threads take every core of a small host): the report must not guess. It has vLLM's
    own HTTP-layer and API-server CPU figures and the load generator's event-loop lag, and names a starved load
    generator as client-bound rather than blaming a gateway."""
    out = tmp_path / "bound"
    args = [
        "run",
        "--scenario",
        "smoke",
        "--target",
        real_vllm.url,
        "--out",
        str(out),
        "--workers",
        "1",
        "--locust-arg=--levels=2,8",
        "--locust-arg=--step-time=6",
    ]
    assert scenarios(args) == 0
    summary = json.loads((out / "report" / "summary.json").read_text())
    rows = read_rows(out / "run-1" / "requests.csv")
    for level in summary["levels"]:
        # Little's law over the scrapes inside a 6 s window, covering T s (the margin is the server's mean e2e / T):
        # each user holds one request at a time, so the durations of the requests that ended in it add up to at most
        # T and the start of the one that straddled its first scrape, no longer than the level's longest request
        covered_s = level["server_e2e_mean_s"] / level["server_load_margin"]
        longest_s = max(float(row["e2e_s"]) for row in rows if int(row["users"]) == level["users"])
        assert 0 < level["server_http_held_mean"] <= level["users"] * (1 + longest_s / covered_s), level
        assert 0 < level["server_frontend_cpu_percent"] < 200, level  # vLLM's process_cpu_seconds_total, scraped
        assert level["client_loop_lag_max_ms"] is not None, level
        if level["client_loop_lag_max_ms"] >= CLIENT_LOOP_LAG_LIMIT_MS:
            assert level["bound"].startswith("client-bound (a load generator's event loop"), level


def cache_counters(url: str) -> dict[str, float]:
    """vLLM's prefix cache counters: prompt tokens looked up and found."""
    metrics = scrape(url)
    return {
        name: sum(v for k, v in metrics.items() if k.startswith(f"vllm:prefix_cache_{name}_total{{"))
        for name in ("queries", "hits")
    }


def test_sessions_carry_the_history_and_vllm_caches_it(run_locust, real_vllm, tmp_path):
    """Three-turn sessions: each later turn carries the history (the first turn's 512 tokens and 128 new ones at
    least), and vLLM reports the history it found in its prefix cache (cached_tokens, with
    --enable-prompt-tokens-details, as deploy/real-vllm.sh starts it). The first turns' lengths are exact; a later
    turn's target (from the previous usage) is not checked here: this random-weight model's answers do not read
    back as the tokens it generated (194 of 200 random 16-token answers re-tokenize to another length)."""
    before = cache_counters(real_vllm.url)
    rows = run_user(
        run_locust,
        real_vllm,
        tmp_path / "run",
        "session",
        "--input-tokens",
        "512",
        "--output-tokens",
        "16",
        "--turns",
        "3",
        "--turn-tokens",
        "128",
        "--think-time",
        "0.1",
        "-t",
        "8s",
        *SHORT[4:],
    )
    ok = [r for r in rows if r["ok"] == "1"]
    assert {r["turn"] for r in ok} == {"1", "2", "3"} and all(r["name"] == "chat-session" for r in ok)
    assert all(r["cached_tokens"] != "" for r in ok), ok
    assert all(r["count_mismatch"] == "0" for r in ok if r["turn"] == "1"), ok
    later = [r for r in ok if r["turn"] != "1"]
    assert all(int(r["prompt_tokens"]) >= 512 + 128 and r["target_prompt_tokens"] for r in later), later
    assert all(int(r["cached_tokens"]) >= 512 - 128 for r in later), later  # the first turn's whole blocks at least
    after = cache_counters(real_vllm.url)
    rows_hits = sum(int(r["cached_tokens"]) for r in ok)
    assert rows_hits == pytest.approx(after["hits"] - before["hits"], rel=0.05)  # the server's own hits


def test_shared_prefix_rows_record_cached_tokens(run_locust, real_vllm, tmp_path):
    rows = run_user(
        run_locust,
        real_vllm,
        tmp_path / "run",
        "chat",
        "--input-tokens",
        "512",
        "--output-tokens",
        "16",
        "--prefix-tokens",
        "384",
        "--prefix-groups",
        "1",
        "-t",
        "4s",
        *SHORT[4:],
    )
    check_rows(rows, "chat", prompt=512)
    cached = [int(r["cached_tokens"]) for r in rows]
    assert sum(c > 0 for c in cached) >= len(cached) - 2 and max(cached) >= 256, cached  # all but the first ones


def test_a_target_hit_rate_is_what_vllms_own_counters_measure(run_locust, real_vllm, tmp_path):
    """--prefix-hit-rate 0.5 on 1,024-token prompts (docs/concepts/prefix-hit-rate.md): the prompts share whole blocks
    of the server's own size (its vllm:cache_config_info), so vLLM's vllm:prefix_cache_hits / queries gained over the
    run is the target, less the first requests' misses (each user's first request may come before the group's
    blocks are cached)."""
    before = scrape(real_vllm.url)
    sizes = ["--input-tokens", "1024", "--output-tokens", "16", "--prefix-hit-rate", "0.5"]
    rows = run_user(run_locust, real_vllm, tmp_path / "run", "chat", *sizes, *SHORT[4:])
    check_rows(rows, "chat", prompt=1024)
    after = scrape(real_vllm.url)
    queries, hits = (
        sum(value - before.get(key, 0.0) for key, value in after.items() if key.startswith(f"vllm:prefix_cache_{what}"))
        for what in ("queries_total{", "hits_total{")
    )
    print(f"vLLM's prefix-cache hit rate {hits / queries:.4f} over {len(rows)} requests (target 0.5)")
    assert queries == 1024 * len(rows), (queries, len(rows))  # each prompt looked up once, at its admission
    first_misses = 2 * 512 / queries  # two users, whose first requests may each miss the 512 shared tokens
    assert 0.5 - first_misses - 0.01 <= hits / queries <= 0.5 + 0.01, (hits, queries, len(rows))
    scraped = read_rows(tmp_path / "run" / "server_metrics.csv")  # the run's own scrapes, by-source counters kept
    counted = ["prompt_tokens", *SERVER_SOURCE_COUNTERS]
    gained = {column: float(scraped[-1][column]) - float(scraped[0][column]) for column in counted}
    computed, cached = gained["prompt_tokens_computed"], gained["prompt_tokens_local_hit"]
    assert (computed + cached, gained["prompt_tokens_external"]) == (gained["prompt_tokens"], 0), gained
    assert cached == gained["cached_tokens_device"] == hits, gained  # the GPU's hits: one count three ways


def test_a_vllm_bench_serve_result_beside_a_locust_run_of_the_same_shape(scenarios, real_vllm, tmp_path, capsys):
    """vLLM's own client (``vllm bench serve --save-result``, 4 in flight, 24 chat requests of 128 prompt tokens
    with the template and 32 output tokens) and the smoke scenario at 4 users against the same server, set side by
    side by ``compare``: one level (4) on both sides, the vLLM side ungated (it has no steady-state verdict)."""
    from benchmarks.crosscheck_vllm_bench import HOME, chat_overhead, run_vllm_bench
    from vllm_stress.analysis.cli import compare_main as compare

    shape = argparse.Namespace(
        model=real_vllm.model,
        tokenizer=str(HOME / "model"),
        input_tokens=128,
        output_tokens=32,
        requests=24,
        concurrency=4,
        client_cpus="",
    )  # this process is pinned already (the fixture); vllm bench inherits it
    bench = run_vllm_bench(shape, real_vllm.url, tmp_path, chat_overhead(real_vllm.url, real_vllm.model))
    assert bench["requests"] == 24 and bench["failed"] == 0
    args = [
        "run",
        "--scenario",
        "smoke",
        "--target",
        real_vllm.url,
        "--out",
        str(tmp_path / "locust"),
        "--workers",
        "1",
        "--locust-arg=--levels=4",
        "--locust-arg=--step-time=6",  # a fixed hold: an auto one ran to its 120 s bound under the suite's load
    ]
    assert scenarios(args) == 0
    meta = json.loads((tmp_path / "locust" / "run-1" / "run.json").read_text())
    assert meta["server_version"] and meta["server_launch"] is None  # its /version; started by the fixture
    code = compare(
        [str(tmp_path / "locust" / "run-1"), str(tmp_path / "vllm_bench.json"), "--out", str(tmp_path / "compare")]
    )
    assert code == 0, capsys.readouterr()
    document = json.loads((tmp_path / "compare" / "compare.json").read_text())
    assert set(document["ungated"]) == {"4"}
    change = {d["metric"]: d for d in document["differences"] if d["users"] == 4}
    assert {"output_tok_s", "ttft_p50", "tpot_p50", "e2e_p50"} <= set(change)
    # the vLLM side is what vllm bench serve measured. The two sides are not asserted to agree: the clients share
    # the machine's cores with a CPU vLLM (and other load), so the server's own speed differs between the two runs.
    assert change["output_tok_s"]["candidate"] == pytest.approx(bench["figures"]["output_tok_s"])
    assert change["ttft_p50"]["candidate"] == pytest.approx(bench["figures"]["ttft_ms"] / 1000)
    assert change["output_tok_s"]["baseline"] > 0 and change["ttft_p50"]["baseline"] > 0
