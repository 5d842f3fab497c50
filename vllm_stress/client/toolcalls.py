"""Tool calls read from a chat answer: ``delta.tool_calls`` fragments joined by index as they stream (the first of a
call carries its id, type and function name, later ones pieces of its arguments: vLLM's
``vllm/tool_parsers/streaming.py``), or a non-streamed ``message.tool_calls``; each call checked (a name, arguments
that are a JSON object)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ToolCall:
    """One tool call of an answer, as far as it came."""

    index: int
    id: str = ""
    name: str = ""
    pieces: list[str] = field(default_factory=list)  # the arguments' fragments, in order

    @property
    def arguments(self) -> str:
        return "".join(self.pieces)

    def problem(self) -> str:
        """Why the call cannot be run ("" : it can): no name, or arguments that are not a JSON object."""
        if not self.name:
            return "ToolCallNoName"
        try:
            parsed = json.loads(self.arguments or "{}")
        except ValueError:
            return "ToolCallInvalidJSON"
        return "" if isinstance(parsed, dict) else "ToolCallInvalidJSON"

    def message_entry(self) -> dict[str, Any]:
        """The call as the assistant message that carries it into the history has it (OpenAI's shape)."""
        return {"id": self.id, "type": "function", "function": {"name": self.name, "arguments": self.arguments}}


class ToolCallReader:
    """The tool calls of one answer (its first choice), from stream deltas or a whole message, and its text."""

    def __init__(self) -> None:
        self.calls: dict[int, ToolCall] = {}
        self.content: list[str] = []

    def delta(self, delta: dict[str, Any]) -> None:
        """A streamed chunk's ``delta``."""
        if content := delta.get("content"):
            self.content.append(content)
        for entry in delta.get("tool_calls") or ():
            index = entry.get("index", len(self.calls))
            call = self.calls.setdefault(index, ToolCall(index))
            call.id = entry.get("id") or call.id
            function = entry.get("function") or {}
            call.name = function.get("name") or call.name
            if arguments := function.get("arguments"):
                call.pieces.append(arguments)

    def message(self, message: dict[str, Any]) -> None:
        """A non-streamed answer's ``message``."""
        if content := message.get("content"):
            self.content.append(content)
        for index, entry in enumerate(message.get("tool_calls") or ()):
            function = entry.get("function") or {}
            self.calls[index] = ToolCall(index, entry.get("id") or "", function.get("name") or "")
            self.calls[index].pieces.append(function.get("arguments") or "")

    @property
    def text(self) -> str:
        return "".join(self.content)

    def tool_calls(self) -> list[ToolCall]:
        return [self.calls[index] for index in sorted(self.calls)]

    def assistant_message(self) -> dict[str, Any]:
        """The answer as the next turn's history carries it, word for word."""
        calls = self.tool_calls()
        message: dict[str, Any] = {"role": "assistant", "content": self.text or None}
        if calls:
            message["tool_calls"] = [call.message_entry() for call in calls]
        return message
