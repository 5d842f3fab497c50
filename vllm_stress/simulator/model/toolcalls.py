"""Tool calls of the simulated model, in vLLM's wire format (``vllm/entrypoints/openai/chat_completion/serving.py``
and ``vllm/tool_parsers/streaming.py``): which turn calls which tool, its arguments, and its chunks and message.

The rule (model-free, so a test can drive it): a request whose ``tools`` are set and whose ``tool_choice`` is not
``"none"`` calls one tool when ``tool_choice`` is ``"required"`` or names a function, and under ``"auto"`` (or no
``tool_choice``) while the conversation holds fewer ``tool`` results than ``vllm_xargs.tool_calls`` (default 1). The
tool is the named one, else ``tools[k % len(tools)]`` with k the tool results so far; its arguments fill the
parameters' schema with seeded values. The call streams as one ``delta.tool_calls`` entry of index 0: its first chunk
carries the id, type and name with the first arguments fragment, later chunks the next fragments; it ends with
``finish_reason`` ``"tool_calls"`` (``"stop"`` for a named ``tool_choice``, as vLLM does)."""

from __future__ import annotations

import json
import random
import uuid
import zlib
from dataclasses import dataclass
from typing import Any

from .answers import Reply, split_tokens
from .sampling import WORDS

DEFAULT_AUTO_CALLS = 1  # tool results a conversation gathers under tool_choice "auto" before the model answers


@dataclass(frozen=True)
class ToolCall:
    """The one tool call of a request's answer (every choice makes it)."""

    name: str
    arguments: str  # JSON text
    named: bool  # tool_choice named the function: vLLM ends the stream with "stop"
    auto: bool  # tool_choice "auto": the non-streamed message has no content

    @property
    def reply(self) -> Reply:
        """What the sequence generates: the arguments' tokens, then EOS."""
        return Reply(0, split_tokens(self.arguments))

    def finish_reason(self, engine_reason: str) -> str:
        """vLLM's: a call that ended (EOS) is "tool_calls", "stop" for a named tool_choice; "length" stays."""
        return "tool_calls" if engine_reason == "stop" and not self.named else engine_reason


def _tools(body: dict) -> list[dict]:
    tools = body.get("tools")
    if not isinstance(tools, list):
        return []
    return [t["function"] for t in tools if isinstance(t, dict) and isinstance(t.get("function"), dict)]


def _auto_calls(body: dict) -> int:
    xargs = body.get("vllm_xargs")
    value = xargs.get("tool_calls") if isinstance(xargs, dict) else None
    return value if isinstance(value, int) and not isinstance(value, bool) else DEFAULT_AUTO_CALLS


def plan_tool_call(body: dict, seed: int) -> ToolCall | None:
    """The tool call the answer to chat request ``body`` makes, or None (the rule in the module's docstring)."""
    tools = _tools(body)
    choice = body.get("tool_choice", "auto")
    if not tools or choice == "none":
        return None
    messages = body.get("messages") or []
    results = sum(1 for message in messages if isinstance(message, dict) and message.get("role") == "tool")
    named = isinstance(choice, dict)
    if named:
        name = (choice.get("function") or {}).get("name")
        function = next((tool for tool in tools if tool.get("name") == name), {"name": name})
    elif choice == "required" or results < _auto_calls(body):
        function = tools[results % len(tools)]
    else:
        return None
    rng = random.Random(f"{seed}/{zlib.crc32(json.dumps(messages, sort_keys=True).encode())}")
    arguments = json.dumps(_value(function.get("parameters") or {}, rng))
    return ToolCall(str(function.get("name") or ""), arguments, named, choice == "auto")


def _value(schema: Any, rng: random.Random) -> Any:
    """A seeded value of a JSON schema's type: an object holds every property it lists."""
    if not isinstance(schema, dict):
        return None
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    kind = schema.get("type", "object")
    if kind == "object":
        properties = schema.get("properties") or {}
        return {name: _value(sub, rng) for name, sub in properties.items()}
    if kind == "array":
        return [_value(schema.get("items") or {"type": "string"}, rng)]
    if kind == "integer":
        return rng.randint(1, 100)
    if kind == "number":
        return round(rng.uniform(0, 100), 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "string":
        return " ".join(rng.choices(WORDS, k=rng.randint(1, 3)))
    return None


class ToolChunks:
    """The SSE chunks of one streamed tool call (after vLLM's role chunk)."""

    def __init__(self, call: ToolCall) -> None:
        self.call = call
        self.call_id = f"chatcmpl-tool-{uuid.uuid4().hex}"

    def delta(self, text: bytes, start: int) -> bytes:
        """The ``delta`` of the chunk carrying arguments fragment ``text`` (tokens from ``start``); the first
        announces the call. An empty fragment after the first (the final EOS) is an empty delta, as vLLM sends."""
        fragment = b'"%s"' % text  # the tokens are escaped for a JSON string already (answers.split_tokens)
        if start == 0:
            head = b'{"id":"%s","type":"function","index":0,"function":{"name":%s,"arguments":%s}}' % (
                self.call_id.encode(),
                json.dumps(self.call.name).encode(),
                fragment,
            )
            return b'{"tool_calls":[%s]}' % head
        if not text:
            return b"{}"
        return b'{"tool_calls":[{"index":0,"function":{"arguments":%s}}]}' % fragment

    def message(self, message: dict) -> dict:
        """A non-streamed answer's ``message`` with its call (the arguments whole, as far as generated)."""
        arguments = message.get("content") or ""
        call = {"id": self.call_id, "type": "function", "function": {"name": self.call.name, "arguments": arguments}}
        return message | {"content": None if self.call.auto else "", "tool_calls": [call]}
