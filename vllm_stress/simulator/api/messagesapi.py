"""Anthropic's Messages API (``POST /v1/messages``) as vLLM 0.32 serves it: the request becomes a chat request over
the same engine (without ``ignore_eos`` or ``min_tokens``, which vLLM's Messages request does not have), and the
chat stream becomes ``message_start``, a text block (``content_block_start``, its ``content_block_delta`` events,
``content_block_stop``), ``message_delta`` with the stop reason and usage, and ``message_stop``
(docs/guides/endpoints.md)."""

from __future__ import annotations

from ..model.errors import ApiError
from .protocol import ChunkFormat, json_bytes, new_request_id
from .typedapi import Answer, typed_event

STOP_REASONS = {"length": "max_tokens", "stop": "end_turn", "tool_calls": "tool_use"}
_BLOCK_START = b'{"type":"content_block_start","content_block":{"type":"text","text":""},"index":0}'


def text_of(content: object) -> object:
    """A message's or the system prompt's content as chat takes it: a string, or its text blocks as text parts."""
    if isinstance(content, list):
        return [{"type": "text", "text": block.get("text", "")} for block in content if isinstance(block, dict)]
    return content


def chat_body(body: dict) -> dict:
    """The chat request vLLM runs for a Messages request: ``system`` first, ``max_tokens``, its sampling fields; a
    stream always reports its usage."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages or not isinstance(body.get("max_tokens"), int):
        raise ApiError("body: 'messages' (a non-empty list) and 'max_tokens' are required", param="messages")
    system = [{"role": "system", "content": text_of(body["system"])}] if body.get("system") else []
    chat = {key: body[key] for key in ("model", "max_tokens", "temperature", "top_p", "top_k") if key in body}
    chat["messages"] = system + [
        {"role": message.get("role"), "content": text_of(message.get("content"))}
        for message in messages
        if isinstance(message, dict)
    ]
    if body.get("stop_sequences"):
        chat["stop"] = body["stop_sequences"]
    if "chat_template_kwargs" in body:
        chat["chat_template_kwargs"] = body["chat_template_kwargs"]
    if body.get("stream"):
        chat |= {"stream": True, "stream_options": {"include_usage": True}}
    return chat


def usage_object(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None) -> dict:
    """Anthropic's usage as vLLM builds it: with prompt-token details, ``input_tokens`` leaves out the cached ones."""
    if cached_tokens is None:
        return {"input_tokens": prompt_tokens, "output_tokens": completion_tokens}
    return {
        "input_tokens": prompt_tokens - cached_tokens,
        "output_tokens": completion_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": cached_tokens,
    }


class MessagesApi:
    """One Messages request's answer: its stream's events (``stream_format``) or its whole body (``whole``)."""

    def __init__(self) -> None:
        self.message_id = new_request_id("chatcmpl")  # vLLM keeps the chat completion's id

    def stream_format(self, model: str, prompt_tokens: int, prompt_details: bool, line_ending: bytes) -> ChunkFormat:
        return MessagesFormat(self, model, prompt_tokens, prompt_details, line_ending)

    def whole(self, model: str, answer: Answer) -> dict:
        return {
            "id": self.message_id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": answer.text}],
            "model": model,
            "stop_reason": STOP_REASONS.get(answer.finish_reason or "stop"),
            "usage": usage_object(answer.prompt_tokens, answer.completion_tokens, answer.cached_tokens),
        }


class MessagesFormat(ChunkFormat):
    """The events of one streamed message."""

    done = typed_event("message_stop", b'{"type":"message_stop"}')

    def __init__(
        self, api: MessagesApi, model: str, prompt_tokens: int, prompt_details: bool, line_ending: bytes
    ) -> None:
        super().__init__(True, model, False, prompt_tokens, prompt_details, line_ending=line_ending)
        self.api = api
        self.model = model
        self.finish_reason: str | None = None

    def role(self, index: int) -> bytes:
        """message_start (vLLM's from the chat stream's first chunk) and the text block's start."""
        message: dict[str, object] = {
            "id": self.api.message_id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0},
        }
        start = json_bytes({"type": "message_start", "message": message})
        return typed_event("message_start", start) + typed_event("content_block_start", _BLOCK_START)

    def content(self, index: int, text: bytes, finish_reason: str | None, start: int, end: int) -> bytes:
        """A text delta (``text`` is already JSON string content); vLLM sends none for an empty delta."""
        if finish_reason is not None:
            self.finish_reason = finish_reason
        if not text:
            return b""
        return typed_event(
            "content_block_delta",
            b'{"type":"content_block_delta","delta":{"type":"text_delta","text":"%s"},"index":0}' % text,
        )

    def usage(self, completion_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0) -> bytes:
        """The block's stop and message_delta with the stop reason and the usage (message_stop is ``done``)."""
        cached = cached_tokens if self.prompt_details else None
        delta = {"stop_reason": STOP_REASONS.get(self.finish_reason or "stop"), "stop_sequence": None}
        usage = usage_object(self.prompt_tokens, completion_tokens, cached)
        stop = typed_event("content_block_stop", b'{"type":"content_block_stop","index":0}')
        return stop + typed_event(
            "message_delta", json_bytes({"type": "message_delta", "delta": delta, "usage": usage})
        )
