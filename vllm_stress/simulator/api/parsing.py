"""Request validation for the OpenAI-compatible routes, with vLLM's error statuses and messages
(docs/concepts/simulator.md, section 8)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from ..model.errors import ApiError
from .protocol import json_bytes

ERROR_TYPES = {400: "BadRequestError", 404: "NotFoundError", 500: "InternalServerError"}
COMPLETIONS_DEFAULT_MAX_TOKENS = 16


def error_body(error: ApiError) -> bytes:
    """The JSON body of a refused request, in vLLM's nested OpenAI shape."""
    fields = {"message": error.message, "type": ERROR_TYPES[error.status], "param": error.param, "code": error.status}
    return json_bytes({"error": fields})


@dataclasses.dataclass
class GenerationRequest:
    """The fields of a chat or completions request that change what the simulator does."""

    prompts: list  # chat: one list of (role, text) pairs; completions: strings or lists of token ids
    stream: bool
    include_usage: bool
    continuous_usage: bool
    max_tokens: int | None  # max_completion_tokens wins over max_tokens
    max_tokens_field: str
    min_tokens: int
    ignore_eos: bool
    n: int
    seed: int | None
    stream_interval: int | None
    priority: int  # lower is scheduled first under --scheduling-policy priority (priority.py)


def parse_json(raw: bytes) -> dict:
    try:
        body = json.loads(raw)
    except ValueError as error:
        raise ApiError(f"JSON decode error: {error}") from None
    if not isinstance(body, dict):
        raise ApiError("Input should be a valid dictionary or object to extract fields from")
    return body


def _field(
    body: dict[str, Any], key: str, types: tuple[type, ...], default: object = None, minimum: int | None = None
) -> Any:
    """The JSON value of ``key`` (``default`` when absent or null), checked against ``types`` and ``minimum``."""
    value = body.get(key, default)
    if value is None:
        return default
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
        names = " or ".join(t.__name__ for t in types)
        raise ApiError(f"body.{key}: Input should be a valid {names}, got {value!r}", param=key)
    if minimum is not None and isinstance(value, int) and value < minimum:
        raise ApiError(f"{key} must be at least {minimum}, got {value}.", param=key)
    return value


def check_model(body: dict, served_model_name: str) -> None:
    model = _field(body, "model", (str,))
    if model is not None and model != served_model_name:
        raise ApiError(f"The model `{model}` does not exist.", status=404, param="model")


def _message_text(message: object) -> tuple[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise ApiError("body.messages: each message needs a string 'role'", param="messages")
    content = message.get("content")
    calls = message.get("tool_calls")  # an assistant's tool calls: the template renders them as text
    called = "".join(f"\n{json.dumps(call)}" for call in calls) if isinstance(calls, list) else ""
    if content is None or isinstance(content, str):
        return message["role"], (content or "") + called
    if isinstance(content, list):
        parts = [part.get("text", "") for part in content if isinstance(part, dict) and part.get("type") == "text"]
        return message["role"], "\n".join(parts) + called
    raise ApiError("body.messages: 'content' must be a string or a list of parts", param="messages")


def parse_messages(body: dict) -> list[tuple[str, str]]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise ApiError("body.messages: Field required (a non-empty list)", param="messages")
    parsed = [_message_text(message) for message in messages]
    tools = body.get("tools")  # templates write the tools' definitions into the first message (Llama 3.1's too)
    if isinstance(tools, list) and tools:
        role, text = parsed[0]
        parsed[0] = role, f"{json.dumps(tools)}\n{text}"
    return parsed


def _is_token_list(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)


def parse_prompts(body: dict) -> list:
    prompt = body.get("prompt")
    if isinstance(prompt, str) or (_is_token_list(prompt) and prompt):
        return [prompt]
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) or _is_token_list(p) for p in prompt):
        return prompt
    raise ApiError("body.prompt: Field required (a string, a list of strings or of token ids)", param="prompt")


def _stream_options(body: dict, stream: bool) -> tuple[bool, bool]:
    options = _field(body, "stream_options", (dict,))
    if options is None:
        return False, False
    if not stream:
        raise ApiError("Stream options can only be defined when `stream=True`.", param="stream_options")
    include_usage = _field(options, "include_usage", (bool,), False)
    continuous = _field(options, "continuous_usage_stats", (bool,), False)
    return include_usage, continuous


def parse_generation(body: dict, prompts: list) -> GenerationRequest:
    stream = _field(body, "stream", (bool,), False)
    include_usage, continuous = _stream_options(body, stream)
    field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    return GenerationRequest(
        prompts=prompts,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous,
        max_tokens=_field(body, field, (int,), None, minimum=1),
        max_tokens_field=field,
        min_tokens=_field(body, "min_tokens", (int,), 0, minimum=0),
        ignore_eos=_field(body, "ignore_eos", (bool,), False),
        n=_field(body, "n", (int,), 1, minimum=1),
        seed=_field(body, "seed", (int,), None),
        stream_interval=_field(body, "stream_interval", (int,), None, minimum=1),
        priority=_field(body, "priority", (int,), 0),
    )


def resolve_max_tokens(request: GenerationRequest, prompt_len: int, max_model_len: int, default: int | None) -> int:
    """The output budget of one prompt, or the 400 vLLM answers; ``default`` None = all the room left."""
    if prompt_len >= max_model_len:
        raise ApiError(
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt contains "
            f"{prompt_len} input tokens, which exceeds this limit even without any output tokens. "
            "Please reduce the length of the input prompt.",
            param="input_tokens",
        )
    room = max_model_len - prompt_len
    requested = request.max_tokens if request.max_tokens is not None else default
    if requested is None:
        return room
    if requested > max_model_len:
        raise ApiError(
            f"{request.max_tokens_field}={requested} cannot be greater than max_model_len={max_model_len}.",
            param=request.max_tokens_field,
        )
    return min(requested, room)
