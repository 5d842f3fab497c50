"""Locustfile: Anthropic's Messages API (``/v1/messages``) as vLLM serves it, streamed by default, timed like chat.

vLLM's Messages API takes no ``ignore_eos`` or ``min_tokens``: the answers end where the model stops (at most
``max_tokens``), so their output length is not checked against the target (docs/guides/endpoints.md).

locust -f locustfiles/messages.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm_stress.client.canary import CANARY_SAMPLING
from vllm_stress.client.classes import request_fields
from vllm_stress.client.events import MessagesParser, read_message_json
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.client.stream import read_body
from vllm_stress.users.base import LLMUser

if TYPE_CHECKING:
    from geventhttpclient.response import HTTPSocketPoolResponse

    from vllm_stress.client.exchange import Exchange


class MessagesUser(LLMUser):
    path = "/v1/messages"
    request_name = "messages"
    chat = True  # vLLM turns the messages into a chat request: /tokenize sizes the prompt with its template
    forces_output = False  # no ignore_eos: the output's length is the model's

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        fields: dict[str, Any] = {
            "max_tokens": spec.max_tokens,
            "stream": self.stream,
            "messages": [{"role": "user", "content": spec.text}],
        }
        if self.target.model:
            fields["model"] = self.target.model
        if spec.canary:  # greedy; the Messages API has no seed
            fields["temperature"] = CANARY_SAMPLING["temperature"]
        elif self.temperature is not None:
            fields["temperature"] = self.temperature
        if not self.thinking:
            fields["chat_template_kwargs"] = {"enable_thinking": False, "thinking": False}
        if self.reasoning_effort:
            fields["output_config"] = {"effort": self.reasoning_effort}
        return fields | request_fields(self.traffic_class)

    def read_stream(self, stream: HTTPSocketPoolResponse, exchange: Exchange) -> None:
        read_body(stream, MessagesParser(exchange), exchange)

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_message_json(response, exchange)
