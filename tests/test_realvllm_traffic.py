"""The traffic tier against one real vLLM (CPU build) with LoRA adapters, priority scheduling and tool choice on (the
``real_vllm_traffic`` fixture, tests/conftest.py): the names and fields the suite relies on, as vLLM serves them."""

from __future__ import annotations

import pytest
import requests

from benchmarks.harness import read_rows
from tests.helpers import REPO, Server
from vllm_stress.client.structured import CUT, INVALID, VALID, JsonSchema, judge

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


SCHEMAS = REPO / "scenarios" / "data" / "schemas"
VERDICTS = {VALID, INVALID, CUT}


def test_json_schema_answers_are_judged_and_first_uses_marked(run_locust, real_vllm_traffic: Server, tmp_path):
    """Random weights wander inside the grammar, so most answers reach max_tokens: each is valid or flagged by the
    code a load test judges with. vLLM lets EOS through only once the JSON is complete, so an answer that stopped is
    valid; each schema's first request in the run is its first use."""
    out = tmp_path / "run"
    args = ["-f", "locustfiles/chat.py", "-H", real_vllm_traffic.url, "-u", "2", "-r", "2", "-t", "4s"]
    args += ["--stop-timeout", "30", "--results-dir", str(out), "--input-tokens", "32", "--output-tokens", "24"]
    proc = run_locust(*args, "--headless", "--json-schema", str(SCHEMAS), "--json-schema-new-share", "0.5")
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


def test_a_required_tool_call_is_judged_by_the_same_code(real_vllm_traffic: Server):
    """vLLM enforces tool_choice required with the same grammar engine: the call's arguments are judged against the
    tool's parameters as a --json-schema answer is (a call cut by max_tokens comes back as empty content)."""
    parameters = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12}}, "required": ["city"]}
    tool = {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}
    body = {"model": real_vllm_traffic.model, "messages": [{"role": "user", "content": "weather in Oslo?"}]}
    body |= {"tools": [tool], "tool_choice": "required", "max_tokens": 48}
    answer = requests.post(f"{real_vllm_traffic.url}/v1/chat/completions", json=body, timeout=120)
    assert answer.status_code == 200, answer.text
    choice = answer.json()["choices"][0]
    calls = choice["message"].get("tool_calls") or []
    arguments = calls[0]["function"]["arguments"] if calls else choice["message"].get("content") or ""
    verdict = judge(JsonSchema("get_weather", parameters, False), arguments, choice["finish_reason"])
    assert verdict in VERDICTS
    if calls:
        assert calls[0]["function"]["name"] == "get_weather" and verdict == VALID, choice
    else:
        assert choice["finish_reason"] == "length" and verdict != VALID, choice
