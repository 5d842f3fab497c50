"""The traffic tier against one real vLLM (CPU build) with LoRA adapters and priority scheduling on (the
``real_vllm_traffic`` fixture, tests/conftest.py): the names and fields the suite relies on, as vLLM serves them."""

from __future__ import annotations

import pytest
import requests

from tests.helpers import Server

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
