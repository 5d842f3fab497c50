"""Locustfile: OpenAI's Responses API (``/v1/responses``), streamed by default, timed like chat.

locust -f locustfiles/responses.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm_stress.client.canary import CANARY_SAMPLING
from vllm_stress.client.classes import request_fields
from vllm_stress.client.events import ResponsesParser, read_response_json
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.client.stream import read_body
from vllm_stress.users.base import LLMUser

if TYPE_CHECKING:
    from geventhttpclient.response import HTTPSocketPoolResponse

    from vllm_stress.client.exchange import Exchange


class ResponsesUser(LLMUser):
    path = "/v1/responses"
    request_name = "responses"
    chat = True  # vLLM puts the input string under the chat template as one user message: /tokenize sizes it so

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        # store: false, or vLLM keeps every response for a later GET /v1/responses/{id}; the output length is
        # forced with ignore_eos (vLLM's Responses API has no min_tokens: without a stop string it runs to the limit)
        fields: dict[str, Any] = {
            "input": spec.text,
            "max_output_tokens": spec.max_tokens,
            "stream": self.stream,
            "store": False,
        }
        if self.target.model:
            fields["model"] = self.target.model
        if spec.canary:
            fields |= CANARY_SAMPLING
        elif self.ignore_eos:
            fields["ignore_eos"] = True
        if self.temperature is not None and not spec.canary:
            fields["temperature"] = self.temperature
        if not self.thinking:
            fields["chat_template_kwargs"] = {"enable_thinking": False, "thinking": False}
        if self.reasoning_effort:
            fields["reasoning"] = {"effort": self.reasoning_effort}
        return fields | request_fields(self.traffic_class)

    def read_stream(self, stream: HTTPSocketPoolResponse, exchange: Exchange) -> None:
        read_body(stream, ResponsesParser(exchange), exchange)

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_response_json(response, exchange)
