"""The traffic tier against one real vLLM (CPU build) with LoRA adapters, priority scheduling and tool calls on (the
``real_vllm_traffic`` fixture, tests/conftest.py): the names and fields the suite relies on, as vLLM serves them."""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import requests

from benchmarks.harness import read_rows, scrape
from tests.helpers import NO_CANARIES, REPO, Server, served_as_rows, server_completed, wait_until
from vllm_stress.client.sessiontrace import read_sessions
from vllm_stress.client.structured import CUT, INVALID, VALID, JsonSchema, judge
from vllm_stress.client.toolcalls import ToolCallReader
from vllm_stress.core.schema import SESSION_PRIMER

pytestmark = pytest.mark.timeout(600)


def test_the_server_takes_priorities_and_exports_its_lora_slots(real_vllm_traffic: Server):
    """vLLM's `priority` field is accepted under --scheduling-policy priority, and its LoRA gauge carries the slot
    count (`max_lora`) and the adapters running and waiting as labels (vllm/v1/metrics/loggers.py)."""
    body = {"model": real_vllm_traffic.model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    answer = requests.post(f"{real_vllm_traffic.url}/v1/chat/completions", json=body | {"priority": 1}, timeout=60)
    assert answer.status_code == 200, answer.text
    metrics = requests.get(f"{real_vllm_traffic.url}/metrics", timeout=10).text
    lora = next(line for line in metrics.splitlines() if line.startswith("vllm:lora_requests_info{"))
    for label in ('max_lora="2"', "running_lora_adapters=", "waiting_lora_adapters="):
        assert label in lora, lora


LORA_NAME = "tiny-lora"
# vLLM's request log (--enable-log-requests, vllm/entrypoints/serve/utils/request_logger.py): one line per request
# received, naming its LoRA adapter or None for the base model
RECEIVED = re.compile(r"Received request (\S+): .*lora_request: (?:None|LoRARequest\(lora_name='([^']*)')")


def make_adapter(out: Path) -> None:
    """A rank-8 random adapter of the tiny model's q_proj and v_proj (deploy/tiny_lora.py, in the vLLM venv)."""
    subprocess.run(
        ["bash", REPO / "deploy" / "real-vllm.sh", "lora", out, "8"], check=True, capture_output=True, timeout=300
    )


def logged_models(log: str, request_ids: set[str]) -> Counter[str]:
    """The requests vLLM logged receiving, per model ("" for the base model), of those whose id holds one of
    ``request_ids`` (vLLM prefixes the X-Request-Id it adopts, e.g. chatcmpl-<id>)."""
    models: Counter[str] = Counter()
    for match in RECEIVED.finditer(Path(log).read_text(errors="replace")):
        served_id, adapter = match.group(1), match.group(2) or ""
        if any(request_id in served_id for request_id in request_ids):
            models[adapter] += 1
    return models


def test_rows_per_adapter_equal_the_requests_vllm_received_per_adapter(real_vllm_traffic: Server, run_locust, tmp_path):
    """An adapter made now, loaded at runtime, drawn per request beside the base model: each model's rows equal the
    requests vLLM's own request log names that model for."""
    server = real_vllm_traffic
    make_adapter(tmp_path / LORA_NAME)
    body = {"lora_name": LORA_NAME, "lora_path": str(tmp_path / LORA_NAME)}
    loaded = requests.post(f"{server.url}/v1/load_lora_adapter", json=body, timeout=120)
    assert loaded.status_code == 200, loaded.text
    cards = {card["id"]: card for card in requests.get(f"{server.url}/v1/models", timeout=10).json()["data"]}
    assert cards[LORA_NAME]["parent"] == server.model
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/chat.py", "-H", server.url, "-u", "2", "-r", "2", "-t", "6s", "--stop-timeout", "60"),
        *("--results-dir", str(out), "--input-tokens", "32", "--output-tokens", "8"),
        *(
            "--headless",
            "--only-summary",
            "-L",
            "WARNING",
            *NO_CANARIES,
            "--lora-adapters",
            f"{server.model},{LORA_NAME}",
        ),
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(out / "requests.csv")
    assert rows and all(row["ok"] == "1" for row in rows), rows
    per_model = Counter(row["adapter"] for row in rows)
    assert set(per_model) == {server.model, LORA_NAME}
    logged = logged_models(server.log, {row["request_id"] for row in rows})
    assert {server.model: logged[""], LORA_NAME: logged[LORA_NAME]} == per_model
    assert "2" in {row["max_lora"] for row in read_rows(out / "server_metrics.csv")}  # the LoRA gauge, scraped


def prompt_buckets(url: str) -> dict[float, float]:
    """The server's own count of finished requests by prompt length: vllm:request_prompt_tokens' buckets {le: count}."""
    samples = scrape(url)
    buckets: dict[float, float] = {}
    for key, value in samples.items():
        if key.startswith("vllm:request_prompt_tokens_bucket{"):
            le = float(next(label for label in key[:-1].split("{", 1)[1].split(",") if label.startswith("le="))[3:])
            buckets[le] = buckets.get(le, 0.0) + value
    return buckets


def test_two_priority_classes_rows_equal_the_servers_counts(run_locust, real_vllm_traffic: Server, tmp_path):
    """Two classes of different priority and prompt length: every row is of its class, sized as declared, and each
    class's rows equal the requests the server itself counted in that class's prompt-length bucket
    (vllm:request_prompt_tokens: 40 tokens fall in (20, 50], 300 in (200, 500])."""
    before = prompt_buckets(real_vllm_traffic.url)
    out = tmp_path / "run"
    classes = "interactive:input=40,output=8,priority=0; batch:weight=2,input=300,output=8,priority=1"
    proc = run_locust(
        *("-f", "locustfiles/chat.py", "-H", real_vllm_traffic.url, "-u", "3", "-r", "3", "-t", "4s"),
        *("--stop-timeout", "30", "--results-dir", str(out), "--traffic-class", classes),
        *("--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(out / "requests.csv")
    after = prompt_buckets(real_vllm_traffic.url)
    counted = {le: after[le] - before.get(le, 0.0) for le in after}
    by_class = Counter(r["class"] for r in rows)
    assert set(by_class) == {"interactive", "batch"}, by_class
    for r in rows:
        assert (r["ok"], r["count_mismatch"]) == ("1", "0"), r
        assert int(r["prompt_tokens"]) == {"interactive": 40, "batch": 300}[r["class"]], r
    assert by_class["interactive"] == counted[50.0] - counted[20.0]
    assert by_class["batch"] == counted[500.0] - counted[200.0]
    assert counted[20.0] == 0 and counted[float("inf")] == counted[500.0]  # no request of another length
    assert json.loads((out / "run.json").read_text())["traffic_classes"][1]["priority"] == 1


SCHEMAS = REPO / "scenarios" / "data" / "schemas"
VERDICTS = {VALID, INVALID, CUT}


def test_json_schema_answers_are_judged_and_first_uses_marked(run_locust, real_vllm_traffic: Server, tmp_path):
    """Random weights wander inside the grammar, so most answers reach max_tokens: each is valid or flagged by the
    code a load test judges with. vLLM lets EOS through only once the JSON is complete, so an answer that stopped is
    valid; each schema's first request in the run is its first use."""
    out = tmp_path / "run"
    args = ["-f", "locustfiles/chat.py", "-H", real_vllm_traffic.url, "-u", "2", "-r", "2", "-t", "4s"]
    args += ["--stop-timeout", "30", "--results-dir", str(out), "--input-tokens", "32", "--output-tokens", "24"]
    proc = run_locust(
        *args, "--headless", *NO_CANARIES, "--json-schema", str(SCHEMAS), "--json-schema-new-share", "0.5"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = sorted(read_rows(out / "requests.csv"), key=lambda row: float(row["start_time"]))
    assert rows and all(row["ok"] == "1" for row in rows), rows
    seen = set()
    for row in rows:
        assert row["answer_valid"] in VERDICTS and int(row["completion_tokens"]) <= 24, row
        assert row["finish_reason"] != "stop" or row["answer_valid"] == VALID, row
        assert row["answer_valid"] != CUT or row["finish_reason"] == "length", row
        assert row["schema_first_use"] == ("0" if row["schema_id"] in seen else "1"), row
        seen.add(row["schema_id"])
    assert seen - {"order", "ticket"}, "no new schema was sent"


def finished_by_reason(url: str) -> Counter[str]:
    """The requests the server finished, by the reason it recorded (vLLM's request_success_total)."""
    reasons: Counter[str] = Counter()
    for key, value in scrape(url).items():
        if match := re.match(r"vllm:request_success_total\{.*finished_reason=(\w+)", key):
            reasons[match[1]] += int(value)
    return reasons


def test_a_required_tool_call_is_judged_by_the_same_code(real_vllm_traffic: Server):
    """vLLM enforces tool_choice required with the same grammar engine: the call's arguments are judged against the
    tool's parameters as a --json-schema answer is. The verdict follows what the server recorded of the request (its
    finish reason in /metrics): the server stops a call only when the grammar's JSON is whole, so a call that stopped
    is valid; one max_tokens cut off is cut (its call, when vLLM parsed one from the partial JSON, or its empty
    content), never invalid."""
    parameters = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}
    body = {"model": real_vllm_traffic.model, "messages": [{"role": "user", "content": "weather in Oslo?"}]}
    body |= {"tools": [tool], "tool_choice": "required", "max_tokens": 48}
    before = finished_by_reason(real_vllm_traffic.url)
    answer = requests.post(f"{real_vllm_traffic.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    recorded = finished_by_reason(real_vllm_traffic.url) - before
    assert sum(recorded.values()) == 1, recorded  # this request alone: the module's tests run one at a time
    (reason,) = recorded
    choice = answer.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    arguments = calls[0]["function"]["arguments"] if calls else choice["message"].get("content") or ""
    verdict = judge(JsonSchema("get_weather", parameters, False), arguments, choice["finish_reason"])
    assert reason in ("stop", "length") and (reason == "length") == (choice["finish_reason"] == "length"), recorded
    assert all(call["function"]["name"] == "get_weather" for call in calls), choice
    if reason == "stop":  # the grammar's JSON is whole: the call is there and valid
        assert calls and verdict == VALID, choice
    else:  # max_tokens stopped it: cut, unless its last token happened to close the JSON
        assert verdict == CUT or (verdict == VALID and calls), (recorded, choice)


def test_a_required_tool_choice_streams_calls_the_agent_reader_joins(real_vllm_traffic: Server):
    """vLLM's ``tool_choice: required`` (--tool-call-parser) streams ``delta.tool_calls`` by index: the first entry of
    a call has its id, type and name, later ones argument fragments. The agent user's reader joins them into named
    calls; the tiny model's arguments are flagged when they are not a JSON object."""
    tool = {"name": "get_weather", "parameters": {"type": "object", "properties": {"n": {"type": "integer"}}}}
    body = {
        "model": real_vllm_traffic.model,
        "messages": [{"role": "user", "content": "Weather in Paris?"}],
        "tools": [{"type": "function", "function": tool}],
        "tool_choice": "required",
        "max_tokens": 40,
        "stream": True,
    }
    streamed = requests.post(f"{real_vllm_traffic.url}/v1/chat/completions", json=body, stream=True, timeout=120)
    assert streamed.status_code == 200, streamed.text
    reader, firsts, reasons = ToolCallReader(), [], []
    for line in streamed.iter_lines():
        if line.startswith(b"data: {"):
            for choice in json.loads(line[6:])["choices"]:
                reader.delta(choice["delta"])
                firsts += [e for e in choice["delta"].get("tool_calls") or () if "id" in e]
                reasons.append(choice["finish_reason"])
    calls = reader.tool_calls()
    assert calls and [(e["index"], e["id"], e["type"], e["function"]["name"]) for e in firsts] == [
        (call.index, call.id, "function", "get_weather") for call in calls
    ]
    assert [call.index for call in calls] == list(range(len(calls)))
    finished = calls if reasons[-1] != "length" else calls[:-1]  # max_tokens may cut the last call before its arguments
    assert all(call.arguments for call in finished)
    assert all(call.problem() in ("", "ToolCallInvalidJSON") for call in calls)
    assert reasons[-1] in ("tool_calls", "length")


BAILIAN = REPO / "scenarios" / "data" / "bailian-sample.jsonl"


def test_recorded_bailian_sessions_find_their_history_in_vllms_cache(real_vllm_traffic: Server, run_locust, tmp_path):
    """The Bailian sample replayed as sessions (16-token trace blocks, the format's own): every turn's prompt is its
    recorded length by vLLM's usage, and each later turn finds its parent's prompt in vLLM's prefix cache, in whole
    blocks of the server's 128 tokens (the CPU build's default): at most that prompt, at least its whole blocks
    less the template's closing tokens; the rows' cached tokens are vLLM's own counter's gain."""
    before = scrape(real_vllm_traffic.url)
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/session.py", "-H", real_vllm_traffic.url, "-u", "2", "-r", "2", "-t", "8s"),
        *("--session-trace", str(BAILIAN), "--idle-gap-cap", "0.1", "--stop-timeout", "30"),
        *("--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = scrape(real_vllm_traffic.url)
    recorded = {session.session_id: session.turns for session in read_sessions(str(BAILIAN))}
    ok = [row for row in read_rows(out / "requests.csv") if row["ok"] == "1"]
    later = [row for row in ok if row["turn"] != "1"]
    assert len(later) >= 3, len(ok)
    for row in ok:
        turn = recorded[row["session_id"].split("/")[0]][int(row["turn"]) - 1]
        assert int(row["prompt_tokens"]) == turn.input_tokens and row["count_mismatch"] == "0", row
    for row in later:  # the parent's prompt is the head of this one, all but the template's closing tokens
        parent = recorded[row["session_id"].split("/")[0]][int(row["turn"]) - 2].input_tokens
        assert (parent - 32) // 128 * 128 <= int(row["cached_tokens"]) <= parent, (row["cached_tokens"], parent)
    gained = sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith("vllm:prefix_cache_hits_total{"))
    assert sum(int(row["cached_tokens"]) for row in ok) == gained


DYNAMO = REPO / "scenarios" / "data" / "dynamo-sample.jsonl"


def test_a_dynamo_session_joined_mid_way_finds_its_primed_history_in_vllms_cache(
    real_vllm_traffic: Server, run_locust, tmp_path
):
    """The Dynamo sample (16-token sequence-hash blocks) replayed with --session-start 0.5: each user's first session
    joins past half its turns, after a primer (max_tokens 1) of the last turn skipped. vLLM counts each primer's
    prompt as that turn's recorded length, and the joined turn finds at least the whole 128-token blocks it shares
    with the primer in vLLM's prefix cache; every row's cached tokens are vLLM's own counter's gain, and vLLM
    finished the requests the rows say, primers included."""
    before, served_before = scrape(real_vllm_traffic.url), server_completed(real_vllm_traffic.url)
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/session.py", "-H", real_vllm_traffic.url, "-u", "2", "-r", "2", "-t", "8s"),
        *("--session-trace", str(DYNAMO), "--session-start", "0.5", "--idle-gap-cap", "0.1"),
        *("--stop-timeout", "30", "--results-dir", str(out), "--headless", "--only-summary", "-L", "WARNING"),
        *NO_CANARIES,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    after = scrape(real_vllm_traffic.url)
    rows = read_rows(out / "requests.csv")
    recorded = {session.session_id: session.turns for session in read_sessions(str(DYNAMO))}
    joined = {}  # each session a user joined (its first pass): the first turn it sent
    for row in rows:
        if row["session_id"].count("/") == 1 and row["session_id"].endswith("/0"):
            joined.setdefault(row["session_id"].split("/")[0], row)
    assert {name: int(row["turn"]) for name, row in joined.items()} == {"sess-coder": 3, "sess-review": 2}
    primers = [row for row in rows if row["name"] == SESSION_PRIMER]
    skipped = {name: recorded[name][int(row["turn"]) - 2] for name, row in joined.items()}
    assert sorted(int(row["prompt_tokens"]) for row in primers) == sorted(t.input_tokens for t in skipped.values())
    assert all((row["ok"], row["completion_tokens"], row["session_id"]) == ("1", "1", "") for row in primers)
    for name, row in joined.items():
        turn = recorded[name][int(row["turn"]) - 1]
        shared = next(
            (i for i, (a, b) in enumerate(zip(skipped[name].hash_ids, turn.hash_ids, strict=False)) if a != b),
            min(len(skipped[name].hash_ids), len(turn.hash_ids)),
        )
        # whole blocks of vLLM's 128 tokens in the shared head, less the template's tokens the primer's blocks make
        # room for (as in the Bailian test above)
        floor = (min(shared * 16, skipped[name].input_tokens) - 32) // 128 * 128
        assert floor >= 128 and floor <= int(row["cached_tokens"]) <= turn.input_tokens, (name, row, floor)
    gained = sum(v - before.get(k, 0.0) for k, v in after.items() if k.startswith("vllm:prefix_cache_hits_total{"))
    assert sum(int(row["cached_tokens"] or 0) for row in rows) == gained
    assert served_as_rows(server_completed(real_vllm_traffic.url) - served_before, rows)


def test_a_profile_at_the_knee_is_vllms_own_torch_trace(
    real_vllm_traffic: Server, vllm_profile_dir, run_locust, tmp_path
):
    """--profile-when-running 1 on vLLM's CPU build with its torch profiler: the master's POSTs are answered 200, in
    order, 1.5 s apart, and vLLM wrote its trace into its profiler folder by the time /stop_profile answered."""
    before = set(vllm_profile_dir.rglob("*"))
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/chat.py", "-H", real_vllm_traffic.url, "-u", "2", "-r", "2", "-t", "6s"),
        *("--profile-when-running", "1", "--profile-seconds", "1.5", "--server-metrics-interval", "0.5"),
        *("--stop-timeout", "30", "--results-dir", str(out), "--headless", "--only-summary", *NO_CANARIES),
        *("--input-tokens", "64", "--output-tokens", "16"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    profile = json.loads((out / "run.json").read_text())["profile"]
    assert (profile["start_status"], profile["stop_status"]) == (200, 200), profile
    assert profile["stopped"] - profile["started"] == pytest.approx(1.5, abs=0.5), profile
    traces = [path for path in set(vllm_profile_dir.rglob("*")) - before if path.is_file()]
    assert traces and all(path.stat().st_size > 0 for path in traces), sorted(vllm_profile_dir.rglob("*"))
    print("vLLM's profile:", [(path.name, path.stat().st_size) for path in traces])


# vLLM's abort line (--enable-log-requests, vllm/v1/engine/async_llm.py): the ids it aborted, comma-separated
ABORTED = re.compile(r"Aborted request\(s\) (\S+)\.")


def aborted_ids(log: str) -> list[str]:
    """Every request id vLLM's log says it aborted."""
    return [
        served for match in ABORTED.finditer(Path(log).read_text(errors="replace")) for served in match[1].split(",")
    ]


def test_each_cancelled_stream_is_an_abort_in_vllms_request_log(real_vllm_traffic: Server, run_locust, tmp_path):
    """Every stream the client cut at its 4th chunk (--cancel-share 1) is a request vLLM logged aborting: vLLM counts
    no client abort in its metrics (tests/test_realvllm.py), its request log names each one."""
    out = tmp_path / "run"
    proc = run_locust(
        *("-f", "locustfiles/chat.py", "-H", real_vllm_traffic.url, "-u", "2", "-r", "2", "-t", "4s"),
        *("--cancel-share", "1", "--cancel-after", "4tokens", "--input-tokens", "64", "--output-tokens", "2000"),
        *("--stop-timeout", "30", "--results-dir", str(out), "--headless", "--only-summary", *NO_CANARIES),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_rows(out / "requests.csv")
    cancelled = {row["request_id"] for row in rows if row["error"] == "Cancelled"}
    assert len(cancelled) >= 2 and len(cancelled) == len(rows), rows

    def ours() -> set[str]:
        return {rid for rid in cancelled for served in aborted_ids(real_vllm_traffic.log) if rid in served}

    assert wait_until(lambda: ours() == cancelled, timeout=30), cancelled - ours()
