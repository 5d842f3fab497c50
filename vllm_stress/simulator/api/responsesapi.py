"""OpenAI's Responses API (``POST /v1/responses``) as vLLM 0.32 serves it for a model without harmony: the request
becomes a chat request over the same engine, its answer one message item whose text streams as
``response.output_text.delta`` events between ``response.created`` and ``response.completed`` (with the usage), each
line ``event: <type>`` then ``data: <json>`` and no ``data: [DONE]`` (docs/guides/endpoints.md)."""

from __future__ import annotations

import json
import time
import uuid

from ..model.errors import ApiError
from .protocol import ChunkFormat, json_bytes
from .typedapi import Answer, typed_event

# vLLM's status of a finished response by its chat finish reason, and why an incomplete one stopped
STATUS = {"length": "incomplete", "abort": "cancelled"}


def input_messages(body: dict) -> list[dict]:
    """The chat messages of a Responses request: ``instructions`` as the system message, then ``input`` (a string:
    one user message; a list: its message items, their ``input_text`` parts as text)."""
    given = body.get("input")
    if isinstance(given, str):
        items: list = [{"role": "user", "content": given}]
    elif isinstance(given, list) and given:
        items = [item for item in given if isinstance(item, dict) and item.get("type", "message") == "message"]
    else:
        raise ApiError("body.input: Field required (a string or a list of input items)", param="input")
    messages = []
    for item in items:
        content = item.get("content")
        if isinstance(content, list):
            content = [{"type": "text", "text": part.get("text", "")} for part in content if isinstance(part, dict)]
        messages.append({"role": item.get("role"), "content": content})
    instructions = body.get("instructions")
    return ([{"role": "system", "content": instructions}] if isinstance(instructions, str) else []) + messages


def chat_body(body: dict) -> dict:
    """The chat request vLLM runs for a Responses request (its sampling fields; usage always comes at the end)."""
    chat = {
        key: body[key] for key in ("model", "temperature", "top_p", "seed", "ignore_eos", "priority") if key in body
    }
    chat |= {"messages": input_messages(body), "max_tokens": body.get("max_output_tokens")}
    if "chat_template_kwargs" in body:
        chat["chat_template_kwargs"] = body["chat_template_kwargs"]
    if body.get("stream"):
        chat |= {"stream": True, "stream_options": {"include_usage": True}}
    return chat


def response_object(
    response_id: str, model: str, max_tokens: int, output: list, status: str, usage: dict | None
) -> dict:
    """vLLM's response object (the fields of its ResponsesResponse, in its order)."""
    return {
        "id": response_id,
        "created_at": int(time.time()),
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        "instructions": None,
        "metadata": None,
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "none",
        "tools": [],
        "top_p": 1.0,
        "background": False,
        "max_output_tokens": max_tokens,
        "max_tool_calls": None,
        "previous_response_id": None,
        "prompt": None,
        "reasoning": None,
        "service_tier": "auto",
        "status": status,
        "text": None,
        "top_logprobs": None,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
        "presence_penalty": 0.0,
        "frequency_penalty": 0.0,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "input_messages": None,
        "output_messages": None,
    }


def usage_object(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None) -> dict:
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {
            "cached_tokens": cached_tokens or 0,
            "cache_write_tokens": 0,
            "input_tokens_per_turn": [],
            "cached_tokens_per_turn": [],
        },
        "output_tokens": completion_tokens,
        "output_tokens_details": {
            "reasoning_tokens": 0,
            "tool_output_tokens": 0,
            "output_tokens_per_turn": [],
            "tool_output_tokens_per_turn": [],
        },
        "total_tokens": prompt_tokens + completion_tokens,
    }


def message_item(item_id: str, text: str, status: str) -> dict:
    return {
        "id": item_id,
        "content": [{"annotations": [], "text": text, "type": "output_text", "logprobs": None}],
        "role": "assistant",
        "status": status,
        "type": "message",
        "phase": None,
    }


class ResponsesApi:
    """One Responses request's answer: its stream's events (``stream_format``) or its whole body (``whole``)."""

    def __init__(self, max_tokens: int) -> None:
        self.max_tokens = max_tokens  # the resolved max_output_tokens, as the response object says it
        self.response_id = f"resp_{uuid.uuid4().hex[:16]}"  # vLLM's ids: a prefix, an underscore, 16 hex digits
        self.item_id = f"msg_{uuid.uuid4().hex[:16]}"

    def stream_format(self, model: str, prompt_tokens: int, prompt_details: bool, line_ending: bytes) -> ChunkFormat:
        return ResponsesFormat(self, model, prompt_tokens, line_ending)

    def whole(self, model: str, answer: Answer) -> dict:
        status = STATUS.get(answer.finish_reason or "", "completed")
        usage = usage_object(answer.prompt_tokens, answer.completion_tokens, answer.cached_tokens)
        output = [message_item(self.item_id, answer.text, "completed")]
        return response_object(self.response_id, model, self.max_tokens, output, status, usage)


class ResponsesFormat(ChunkFormat):
    """The events of one streamed response, numbered by their ``sequence_number`` as vLLM numbers them."""

    done = b""  # response.completed (in ``usage``) ends the stream

    def __init__(self, api: ResponsesApi, model: str, prompt_tokens: int, line_ending: bytes) -> None:
        super().__init__(True, model, False, prompt_tokens, line_ending=line_ending)
        self.api = api
        self.model = model
        self.sequence = 0
        self.texts: list[bytes] = []  # the answer's text so far, JSON-escaped as the chunks carry it
        self.finish_reason: str | None = None
        self.item = f'"item_id":{json.dumps(api.item_id)}'.encode()

    def event(self, kind: str, fields: dict) -> bytes:
        data = json_bytes(fields | {"sequence_number": self.sequence, "type": kind})
        self.sequence += 1
        return typed_event(kind, data)

    def opening(self) -> bytes:
        """response.created and response.in_progress, sent before the engine runs the request."""
        initial = response_object(self.api.response_id, self.model, self.api.max_tokens, [], "in_progress", None)
        return self.event("response.created", {"response": initial}) + self.event(
            "response.in_progress", {"response": initial}
        )

    def role(self, index: int) -> bytes:
        item = {"id": self.api.item_id, "content": [], "role": "assistant", "status": "in_progress"}
        part = {"annotations": [], "text": "", "type": "output_text", "logprobs": []}
        return self.event(
            "response.output_item.added", {"item": item | {"type": "message", "phase": None}, "output_index": 0}
        ) + self.event(
            "response.content_part.added",
            {"content_index": 0, "item_id": self.api.item_id, "output_index": 0, "part": part},
        )

    def content(self, index: int, text: bytes, finish_reason: str | None, start: int, end: int) -> bytes:
        """A delta event with ``text`` (already JSON string content); vLLM sends none for an empty delta."""
        if finish_reason is not None:
            self.finish_reason = finish_reason
        if not text:
            return b""
        self.texts.append(text)
        data = b'{"content_index":0,"delta":"%s",%s,"logprobs":[],"output_index":0,"sequence_number":%d,%s}' % (
            text,
            self.item,
            self.sequence,
            b'"type":"response.output_text.delta"',
        )
        self.sequence += 1
        return typed_event("response.output_text.delta", data)

    def usage(self, completion_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0) -> bytes:
        """The closing events: the text, its part and its item done, then response.completed with the usage."""
        text = json.loads(b'"%s"' % b"".join(self.texts))
        api, part = self.api, {"annotations": [], "text": text, "type": "output_text", "logprobs": None}
        item = message_item(api.item_id, text, "completed")
        where = {"content_index": 0, "item_id": api.item_id}
        answer = Answer(text, self.finish_reason, self.prompt_tokens, completion_tokens, cached_tokens)
        body = api.whole(self.model, answer)
        return b"".join(
            (
                self.event("response.output_text.done", where | {"logprobs": [], "output_index": 0, "text": text}),
                self.event("response.content_part.done", where | {"output_index": 0, "part": part}),
                self.event("response.output_item.done", {"item": item, "output_index": 0}),
                self.event("response.completed", {"response": body}),
            )
        )
