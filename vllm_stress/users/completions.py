"""Locustfile: text completions (``/v1/completions``), streamed by default.

locust -f locustfiles/completions.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m"""

from __future__ import annotations

from typing import Any

from vllm_stress.client.prompts import RequestSpec
from vllm_stress.client.structured import completion_fields
from vllm_stress.users.base import LLMUser, sampling


class CompletionsUser(LLMUser):
    path = "/v1/completions"
    request_name = "completions"
    output_marker = b'"choices":[{"index":0,"text":"'
    takes_schemas = True  # --json-schema

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        structured = completion_fields(spec.json_schema) if spec.json_schema else {}
        return sampling(self, spec) | structured | {"prompt": spec.text}

    def is_output(self, choice: dict[str, Any]) -> bool:
        # vLLM's benchmark rule: every completions chunk with a choice carries output (its text may be "")
        return "text" in choice
