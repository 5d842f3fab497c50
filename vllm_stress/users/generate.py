"""Locustfile: the legacy ``/generate`` API of vLLM's old demo server (``vllm.entrypoints.api_server``).

locust -f locustfiles/generate.py -H http://127.0.0.1:8000 --headless -u 4 -t 1m"""

from __future__ import annotations

import json
import time
from typing import Any

from geventhttpclient.response import HTTPSocketPoolResponse

from vllm_stress.client.canary import CANARY_SAMPLING
from vllm_stress.client.exchange import Exchange
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.core.failures import StreamError
from vllm_stress.users.base import LLMUser


class GenerateUser(LLMUser):
    path = "/generate"
    request_name = "generate"
    needs_model = False

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        fields: dict[str, Any] = {"prompt": spec.text, "n": 1, "max_tokens": spec.max_tokens, "stream": self.stream}
        if spec.canary:  # the legacy server takes vLLM's SamplingParams fields as they are
            return fields | CANARY_SAMPLING
        if self.ignore_eos:
            fields |= {"ignore_eos": True, "min_tokens": spec.max_tokens}
        if self.temperature is not None:
            fields["temperature"] = self.temperature
        return fields

    def read_stream(self, stream: HTTPSocketPoolResponse, exchange: Exchange) -> None:
        text = ""
        while line := stream.readline(b"\n"):
            now = time.perf_counter()
            if not line.strip():
                continue
            longer = json.loads(line)["text"][0]  # the prompt and the whole answer so far
            if len(longer) > len(text):
                exchange.output(now)
                text = longer
        if not exchange.chunks:
            raise StreamError("NoOutput", "no line carried output")
        keep_answer(exchange, text)

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        if not isinstance(response.get("text"), list):
            raise StreamError("MalformedJSON", "no text list in the response")
        keep_answer(exchange, response["text"][0] if response["text"] else "")


def keep_answer(exchange: Exchange, text: object) -> None:
    """A canary's answer: the legacy API's text is the prompt followed by the answer."""
    if exchange.canary and isinstance(text, str):
        exchange.keep_text(text.removeprefix(exchange.canary.text))
