"""Response shapes of vLLM 0.33: SSE chunks from pre-built byte templates, and non-streaming JSON bodies
(docs/concepts/simulator.md, section 8)."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass

from ..model.toolcalls import ToolChunks

DONE = b"data: [DONE]\n\n"
_CHAT_ROLE_TAIL = b',"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]'
_CHAT_OPEN_TAIL = b',"logprobs":null,"finish_reason":null,"token_ids":null}]'
_CHAT_CONTENT_TAIL = b'"}' + _CHAT_OPEN_TAIL
_CHAT_FINAL_TAIL = b'","stop_reason":null,"token_ids":null,"weight_versions":null}]'
_COMPLETION_TAIL = b',"stop_reason":null,"prompt_token_ids":null,"token_ids":null,"weight_versions":null}]'
_KV_TAIL = b',"kv_transfer_params":null}\n\n'
LINE_ENDINGS = {"lf": b"\n", "crlf": b"\r\n", "cr": b"\r"}  # the SSE standard's three (--sse-line-ending)


def json_bytes(body: object) -> bytes:
    """Compact JSON, as Starlette's ``JSONResponse`` renders it."""
    return json.dumps(body, separators=(",", ":")).encode()


def new_request_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def usage_json(
    prompt_tokens: int, completion_tokens: int, cached_tokens: int | None = None, reasoning_tokens: int | None = None
) -> bytes:
    """The usage object; with ``cached_tokens`` (``--enable-prompt-tokens-details``) its prompt_tokens_details, with
    ``reasoning_tokens`` (a reasoning model) its completion_tokens_details."""
    total = prompt_tokens + completion_tokens
    body = b'{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d' % (prompt_tokens, total, completion_tokens)
    details = b',"prompt_tokens_details":{"cached_tokens":%d}' % cached_tokens if cached_tokens is not None else b""
    if reasoning_tokens is not None:
        details += b',"completion_tokens_details":{"reasoning_tokens":%d}' % reasoning_tokens
    return body + details + b"}"


@dataclass(frozen=True)
class Reasoning:
    """A reasoning model's output (``--reasoning-tokens``): the first ``tokens`` of each chat choice are streamed as
    ``delta.<field>`` (vLLM's reasoning parsers: ``reasoning``, before 0.10 ``reasoning_content``)."""

    tokens: int
    field: bytes = b"reasoning"


class ChunkFormat:
    """Byte templates shared by all chunks of one streamed response (same id, created, model)."""

    done = DONE  # the stream's last event

    def __init__(
        self,
        chat: bool,
        model: str,
        continuous_usage: bool,
        prompt_tokens: int,
        prompt_details: bool = False,
        reasoning: Reasoning | None = None,
        line_ending: bytes = b"\n",
    ) -> None:
        self.chat = chat
        self.line_ending = line_ending  # vLLM ends SSE lines with LF; a gateway may use CRLF or CR
        self.prompt_details = prompt_details  # the final usage says how many prompt tokens were cached
        self.reasoning = reasoning  # a reasoning model's thinking: the first tokens of each chat choice
        self.request_id = new_request_id("chatcmpl" if chat else "cmpl")
        self.created = int(time.time())
        kind = "chat.completion.chunk" if chat else "text_completion"
        self._head = (
            f'data: {{"id":"{self.request_id}","object":"{kind}","created":{self.created},'
            f'"model":{json.dumps(model)},"choices":'
        ).encode()
        self._choice_head = self._head + b'[{"index":'
        self.continuous_usage = continuous_usage
        self.prompt_tokens = prompt_tokens
        self.tools: ToolChunks | None = None  # the answer is a tool call (toolcalls.py)

    def opening(self) -> bytes:
        """Events sent as soon as the response starts, before any token (none for chat and completions)."""
        return b""

    def frame(self, events: bytes) -> bytes:
        """SSE events made with LF line ends (JSON has none inside), with this response's line ends."""
        return events if self.line_ending == b"\n" else events.replace(b"\n", self.line_ending)

    def _usage(self, completion_tokens: int) -> bytes:
        return b',"usage":' + usage_json(self.prompt_tokens, completion_tokens) if self.continuous_usage else b""

    def role(self, index: int) -> bytes:
        return b"".join(
            (
                self._choice_head,
                b"%d" % index,
                _CHAT_ROLE_TAIL,
                self._usage(0),
                b',"prompt_token_ids":null,"prompt_text":null}\n\n',
            )
        )

    def content(self, index: int, text: bytes, finish_reason: str | None, start: int, end: int) -> bytes:
        """One chunk carrying ``text``, tokens ``start .. end - 1`` of its choice; ``finish_reason`` set makes it the
        last chunk of the choice. A chat chunk that starts within the reasoning carries it as reasoning."""
        field = self.reasoning.field if self.chat and self.reasoning and start < self.reasoning.tokens else b"content"
        if self.tools is not None:
            delta = b',"delta":' + self.tools.delta(text, start)
            if finish_reason is None:
                middle = delta + _CHAT_OPEN_TAIL
            else:
                reason = self.tools.call.finish_reason(finish_reason).encode()
                middle = delta + b',"logprobs":null,"finish_reason":"%s' % reason + _CHAT_FINAL_TAIL
        elif not self.chat:
            reason = b"null" if finish_reason is None else b'"%s"' % finish_reason.encode()
            middle = b',"text":"%s","logprobs":null,"finish_reason":%s' % (text, reason) + _COMPLETION_TAIL
        elif finish_reason is None:
            middle = b',"delta":{"%s":"%s' % (field, text) + _CHAT_CONTENT_TAIL
        else:
            middle = (
                b',"delta":{"%s":"%s"},"logprobs":null,"finish_reason":"%s' % (field, text, finish_reason.encode())
                + _CHAT_FINAL_TAIL
            )
        return b"".join((self._choice_head, b"%d" % index, middle, self._usage(end), _KV_TAIL))

    def usage(self, completion_tokens: int, cached_tokens: int = 0, reasoning_tokens: int = 0) -> bytes:
        """The final usage chunk; a reasoning model's says how many of the completion tokens were reasoning."""
        cached = cached_tokens if self.prompt_details else None
        reasoning = reasoning_tokens if self.reasoning else None
        usage = usage_json(self.prompt_tokens, completion_tokens, cached, reasoning)
        return self._head + b'[],"usage":' + usage + b"}\n\n"


def _usage_dict(prompt_tokens: int, completion_tokens: int, cached_tokens: int | None) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None if cached_tokens is None else {"cached_tokens": cached_tokens},
    }


def chat_response(
    model: str,
    choices: list[tuple[str, str | None]],
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int | None = None,
) -> dict:
    """Non-streaming chat body; ``choices`` = ``(text, finish_reason)`` in index order."""
    return {
        "id": new_request_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": index,
                "message": {
                    "role": "assistant",
                    "content": text,
                    "refusal": None,
                    "annotations": None,
                    "audio": None,
                    "function_call": None,
                    "reasoning": None,
                },
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "routed_experts": None,
                "weight_versions": None,
            }
            for index, (text, finish_reason) in enumerate(choices)
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {**_usage_dict(prompt_tokens, completion_tokens, cached_tokens), "completion_tokens_details": None},
        "prompt_logprobs": None,
        "prompt_token_ids": None,
        "prompt_text": None,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def completion_response(
    model: str,
    choices: list[tuple[str, str | None]],
    prompt_tokens: int,
    completion_tokens: int,
    cached_tokens: int | None = None,
) -> dict:
    """Non-streaming completions body; ``choices`` = ``(text, finish_reason)`` in index order."""
    return {
        "id": new_request_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": index,
                "text": text,
                "logprobs": None,
                "finish_reason": finish_reason,
                "stop_reason": None,
                "token_ids": None,
                "prompt_logprobs": None,
                "prompt_token_ids": None,
                "routed_experts": None,
                "weight_versions": None,
            }
            for index, (text, finish_reason) in enumerate(choices)
        ],
        "service_tier": None,
        "system_fingerprint": None,
        "usage": {**_usage_dict(prompt_tokens, completion_tokens, cached_tokens), "completion_tokens_details": None},
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "metrics": None,
    }


def model_list(model: str, root: str, max_model_len: int, created: int) -> dict:
    permission = {
        "id": new_request_id("modelperm"),
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    card = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": root,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [permission],
    }
    return {"object": "list", "data": [card]}
