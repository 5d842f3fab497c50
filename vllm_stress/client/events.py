"""Reading the typed event streams of OpenAI's Responses API (``/v1/responses``) and Anthropic's Messages API
(``/v1/messages``) as vLLM serves them: each event is ``event: <type>`` and ``data: {"type": "<type>", ...}``, and the
stream ends with its own closing event instead of ``data: [DONE]``. The SSE lines are split and timed by
``stream.SSEParser``; these parsers only say which events carry output, where the usage is and how the answer ended,
so a Responses or Messages row is timed by the same clocks and the same TTFT, ITL and TPOT rules as a chat row
(docs/guides/endpoints.md)."""

from __future__ import annotations

import json
from typing import Any

from vllm_stress.client.exchange import Exchange, error_event
from vllm_stress.client.stream import SSEParser
from vllm_stress.core.failures import StreamError

NEVER = b"\0"  # an output marker no JSON event holds: every event is parsed in full

# Responses API: its events that carry output (answer text, a tool call's arguments) and the reasoning ones
RESPONSES_OUTPUT = {"response.output_text.delta", "response.function_call_arguments.delta"}
RESPONSES_REASONING = {"response.reasoning_text.delta"}
RESPONSES_END = {"response.completed", "response.incomplete", "response.failed"}
# a response's status as a chat finish reason: vLLM sets "incomplete" when max_output_tokens cut it (length) and
# "cancelled" when the request was aborted
RESPONSES_FINISH = {"completed": "stop", "incomplete": "length", "cancelled": "abort", "failed": "error"}

# Messages API: the content_block_delta types that carry output, and its stop reasons as chat finish reasons
MESSAGES_OUTPUT = {"text_delta", "input_json_delta"}
MESSAGES_REASONING = {"thinking_delta"}
MESSAGES_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length", "tool_use": "tool_calls"}


def event_object(data: bytes) -> dict[str, Any]:
    """An event's JSON object; MalformedJSON for anything else, the server's failure for an error event."""
    event = json.loads(data)
    if not isinstance(event, dict):
        raise StreamError("MalformedJSON", f"an event that is not a JSON object: {event!r:.80}")
    if event.get("type") == "error":  # Anthropic's nests its error object, the Responses API's is the event
        raise error_event(event if isinstance(event.get("error"), dict) else {"error": event})
    return event


def responses_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """A Responses usage object in the chat names ``Exchange.usage`` reads."""
    return {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "prompt_tokens_details": usage.get("input_tokens_details"),
        "completion_tokens_details": usage.get("output_tokens_details"),
    }


def messages_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """A Messages usage object in the chat names. vLLM's ``input_tokens`` leaves out the prompt tokens its prefix
    cache held (``cache_read_input_tokens``, sent with --enable-prompt-tokens-details), as Anthropic defines it: the
    prompt is their sum."""
    cached = usage.get("cache_read_input_tokens")
    created = usage.get("cache_creation_input_tokens") or 0
    inputs = usage.get("input_tokens")
    prompt = None if inputs is None else inputs + (cached or 0) + created
    return {
        "prompt_tokens": prompt,
        "completion_tokens": usage.get("output_tokens"),
        "prompt_tokens_details": None if cached is None else {"cached_tokens": cached},
    }


class ResponsesParser(SSEParser):
    """A streamed Responses answer: ``response.output_text.delta`` events are its output chunks, the closing
    ``response.completed`` carries the response with its usage and status."""

    end_event = "response.completed"

    def __init__(self, exchange: Exchange) -> None:
        super().__init__(exchange, NEVER, bool)

    def read_data(self, data: bytes) -> None:
        event = event_object(data)
        kind, exchange = event.get("type"), self.exchange
        if kind in RESPONSES_OUTPUT:
            exchange.output(self.now)
            if kind == "response.output_text.delta":
                exchange.keep_text(event.get("delta"))
        elif kind in RESPONSES_REASONING:
            exchange.output(self.now, reasoning=True)
        elif kind in RESPONSES_END:
            read_response_end(event.get("response") or {}, exchange)
            self.done = True


def read_response_end(response: dict[str, Any], exchange: Exchange) -> None:
    """A finished response (streamed in ``response.completed`` or whole): its usage and how it ended."""
    exchange.usage(responses_usage(response.get("usage") or {}))
    exchange.finish_reason = RESPONSES_FINISH.get(response.get("status") or "", response.get("status") or "")


def read_response_json(response: dict[str, Any], exchange: Exchange) -> None:
    """A non-streamed Responses answer."""
    if response.get("error"):
        raise error_event(response)
    read_response_end(response, exchange)
    for item in response.get("output") or []:
        for part in item.get("content") or []:
            if part.get("type") == "output_text":
                exchange.keep_text(part.get("text"))


class MessagesParser(SSEParser):
    """A streamed Messages answer: ``content_block_delta`` events with text (or a tool's JSON) are its output
    chunks, ``message_delta`` carries the usage and the stop reason, ``message_stop`` ends it."""

    end_event = "message_stop"

    def __init__(self, exchange: Exchange) -> None:
        super().__init__(exchange, NEVER, bool)

    def read_data(self, data: bytes) -> None:
        event = event_object(data)
        kind, exchange = event.get("type"), self.exchange
        if kind == "content_block_delta":
            delta = event.get("delta") or {}
            if delta.get("type") in MESSAGES_OUTPUT:
                exchange.output(self.now)
                exchange.keep_text(delta.get("text"))
            elif delta.get("type") in MESSAGES_REASONING:
                exchange.output(self.now, reasoning=True)
        elif kind == "message_delta":
            read_message_end(event.get("delta") or {}, event.get("usage") or {}, exchange)
        elif kind == "message_stop":
            self.done = True


def read_message_end(stop: dict[str, Any], usage: dict[str, Any], exchange: Exchange) -> None:
    """A finished message's usage and stop reason (streamed in ``message_delta`` or whole)."""
    exchange.usage(messages_usage(usage))
    reason = stop.get("stop_reason") or ""
    exchange.finish_reason = MESSAGES_FINISH.get(reason, reason)


def read_message_json(message: dict[str, Any], exchange: Exchange) -> None:
    """A non-streamed Messages answer."""
    if message.get("type") == "error":
        raise error_event(message)
    read_message_end(message, message.get("usage") or {}, exchange)
    for block in message.get("content") or []:
        if block.get("type") == "text":
            exchange.keep_text(block.get("text"))
