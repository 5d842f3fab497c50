"""Locustfile: chat completions through the official ``openai`` SDK.

locust -f locustfiles/sdk.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import gevent
import httpx2
import openai
from locust import User, task
from openai.types.chat import ChatCompletionChunk

from vllm_stress.client import options as opts
from vllm_stress.client.adapters import AdapterPool, model_field
from vllm_stress.client.exchange import Exchange, is_output_delta, is_reasoning_delta
from vllm_stress.client.images import message_content
from vllm_stress.client.prompts import RequestSpec, Workload
from vllm_stress.core.classes import TrafficClass
from vllm_stress.core.failures import StreamError, failure_name
from vllm_stress.core.schema import CANCELLED
from vllm_stress.users.base import id_headers, log_token_stats, read_options, run_request, sampling, start_user
from vllm_stress.users.target import Target

if TYPE_CHECKING:
    from locust.env import Environment

logging.getLogger("httpx2").setLevel(logging.WARNING)  # the SDK's HTTP client logs every request at INFO


def sdk_failure_name(exc: BaseException) -> str:
    if isinstance(exc, openai.APIStatusError):
        return f"HTTP {exc.status_code}"
    if isinstance(exc, openai.APITimeoutError):
        return "Timeout"
    if isinstance(exc, openai.APIConnectionError):
        return failure_name(exc.__cause__) if exc.__cause__ else "ConnectionError"
    return failure_name(exc)


DONE = b"data: [DONE]"


class DoneWatch(httpx2.BaseTransport):
    """An HTTP transport that notes whether a response body carried ``data: [DONE]`` (the SDK hides it): one flag
    per user, which sends one request at a time."""

    def __init__(self, verify: bool) -> None:
        self.inner = httpx2.HTTPTransport(verify=verify)
        self.done = False

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        self.done = False
        response = self.inner.handle_request(request)
        assert isinstance(response.stream, httpx2.SyncByteStream)  # a sync transport's
        return httpx2.Response(
            response.status_code,
            headers=response.headers,
            stream=self.watched(response.stream),
            request=request,
            extensions=response.extensions,
        )

    def watched(self, stream: httpx2.SyncByteStream) -> httpx2.SyncByteStream:
        watch = self

        class Watched(httpx2.SyncByteStream):
            def __iter__(self) -> Iterator[bytes]:
                tail = b""
                for chunk in stream:
                    watch.done = watch.done or DONE in tail + chunk
                    tail = chunk[-len(DONE) :]
                    yield chunk

            def close(self) -> None:
                stream.close()

        return Watched()

    def close(self) -> None:
        self.inner.close()


class SdkChatUser(User):
    abstract = False
    request_name = "sdk-chat"
    path = "/v1/chat/completions"
    chat = True
    needs_model = True
    takes_images = True  # --images
    target: Target  # FlowUser's: set by read_options and start_user
    traffic_class: TrafficClass | None
    workload: Workload | None
    stream: bool
    ignore_eos: bool
    timeout: float
    temperature: float | None
    thinking: bool
    reasoning_effort: str | None
    no_traceparent: bool
    adapters: AdapterPool | None

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        read_options(self, environment)
        options = self.target.options
        self.transport = DoneWatch(verify=not options.insecure)
        self.client = openai.OpenAI(
            base_url=self.target.host.rstrip("/") + "/v1",
            api_key=opts.api_key(options) or "EMPTY",
            timeout=self.timeout,
            max_retries=0,
            http_client=openai.DefaultHttpxClient(transport=self.transport),
        )

    def on_start(self) -> None:
        start_user(self)

    @task
    def request(self) -> None:
        run_request(self, self.send)

    def send(self, spec: RequestSpec, exchange: Exchange) -> None:
        fields = sampling(self, spec) | model_field(exchange.adapter)
        extra = {
            key: fields.pop(key)
            for key in ("ignore_eos", "min_tokens", "chat_template_kwargs", "priority")
            if key in fields
        }
        messages: Any = [{"role": "user", "content": message_content(spec.text, spec.images)}]  # text or parts
        try:
            with gevent.Timeout(self.timeout, StreamError("Timeout")):
                response = self.client.chat.completions.create(
                    messages=messages, extra_body=extra, extra_headers=id_headers(self, exchange), **fields
                )
                exchange.status = 200
                if self.stream:
                    self.read_stream(response, exchange)
                else:
                    exchange.usage(response.usage.model_dump() if response.usage else {})
                    exchange.finish_reason = response.choices[0].finish_reason or ""
                    exchange.keep_text(response.choices[0].message.content)
        except Exception as e:  # every failure becomes a row and a Locust failure, never an escaped exception
            exchange.status = getattr(e, "status_code", exchange.status)
            exchange.fail(sdk_failure_name(e))
        exchange.finish()
        if exchange.error == CANCELLED:  # cut by the client on purpose (--cancel-share): in no Locust statistic
            return
        self.environment.events.request.fire(
            request_type="POST",
            name=exchange.stats_name,
            response_time=exchange.e2e * 1000,
            response_length=exchange.completion_tokens or 0,
            response=None,
            context={},
            exception=StreamError(exchange.error) if exchange.error else None,
        )
        if not exchange.error:
            log_token_stats(self.environment, exchange)

    def read_stream(self, response: openai.Stream[ChatCompletionChunk], exchange: Exchange) -> None:
        with response:  # closed on the way out: a stream the client cuts (--cancel-after) leaves the server
            for chunk in response:
                now = time.perf_counter()
                if chunk.usage:
                    exchange.usage(chunk.usage.model_dump())
                if chunk.choices:
                    choice = chunk.choices[0]
                    delta = choice.delta.model_dump(exclude_none=True)
                    if is_output_delta(delta):
                        exchange.output(now, is_reasoning_delta(delta))
                        exchange.keep_text(delta.get("content"))
                    if choice.finish_reason:
                        exchange.finish_reason = choice.finish_reason
        exchange.check_stream_end(self.transport.done)
