"""The traffic tier against one real vLLM (CPU build) with LoRA adapters, priority scheduling and tool calls on (the
``real_vllm_traffic`` fixture, tests/conftest.py): the names and fields the suite relies on, as vLLM serves them."""

from __future__ import annotations

import json

import pytest
import requests

from tests.helpers import Server
from vllm_stress.client.toolcalls import ToolCallReader

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
    assert [call.index for call in calls] == list(range(len(calls))) and all(call.arguments for call in calls)
    assert all(call.problem() in ("", "ToolCallInvalidJSON") for call in calls)
    assert reasons[-1] in ("tool_calls", "length")
