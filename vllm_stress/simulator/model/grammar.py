"""Structured outputs in the simulator: the JSON schema a request asks for, an answer that the schema accepts, and
what the grammar costs the engine (docs/guides/structured-outputs.md).

vLLM (``vllm/v1/structured_output``, xgrammar by default) compiles a schema's grammar once, in the engine core,
while the request waits (``WAITING_FOR_STRUCTURED_OUTPUT_GRAMMAR``) and other requests are scheduled past it; the
compiled grammar is cached keyed by the schema's text. Every step then fills each structured sequence's token
bitmask. Here: ``grammar_compile_s`` once per new schema text (a second request of a schema still compiling waits for
the same compile) and ``grammar_mask_s`` per structured sequence in a step, both profile fields."""

from __future__ import annotations

import json
from typing import Any

from .answers import Reply, split_tokens
from .errors import ApiError
from .profiles import Profile
from .sampling import WORDS

_PAD = "<pad>"  # marks the string padded to length; replaced by words
_MAX_ITEMS = 64  # bounds an array's minItems, so a schema cannot ask for an answer of any size


def request_schema(body: dict[str, Any]) -> dict[str, Any] | None:
    """The JSON schema a chat or completions body asks for: ``response_format`` json_schema (or json_object: any
    object), else vLLM's ``structured_outputs.json``; None for an unconstrained request."""
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        if response_format.get("type") == "json_object":
            return {"type": "object"}
        if response_format.get("type") == "json_schema" and isinstance(response_format.get("json_schema"), dict):
            schema = response_format["json_schema"].get("schema")
            return schema if isinstance(schema, dict) else {}
    structured = body.get("structured_outputs")
    if isinstance(structured, dict):
        schema = structured.get("json")
        if isinstance(schema, str):
            try:
                schema = json.loads(schema)
            except ValueError as error:
                raise ApiError(f"structured_outputs.json: {error}", param="structured_outputs") from None
        return schema if isinstance(schema, dict) else None
    return None


def minimal_instance(schema: Any, root: dict[str, Any] | None = None) -> Any:
    """The smallest value ``schema`` accepts, by its keywords (const, enum, $ref, anyOf/oneOf/allOf, type and the
    bounds of each type); a string of length zero that may grow holds the padding mark."""
    root = root if root is not None else schema
    if not isinstance(schema, dict):
        return None if schema is False else {}
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    if isinstance(schema.get("$ref"), str) and schema["$ref"].startswith("#/"):
        target: Any = root
        for part in schema["$ref"][2:].split("/"):
            target = target.get(part, {}) if isinstance(target, dict) else {}
        return minimal_instance(target, root)
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return minimal_instance(schema[key][0], root)
    if schema.get("allOf"):
        merged: dict[str, Any] = {}
        for part in schema["allOf"]:
            merged |= part if isinstance(part, dict) else {}
        return minimal_instance(merged | {k: v for k, v in schema.items() if k != "allOf"}, root)
    kind = schema.get("type", "object" if "properties" in schema else "string")
    kind = next((k for k in kind if k != "null"), "null") if isinstance(kind, list) else kind
    return _typed(kind, schema, root)


def _typed(kind: str, schema: dict[str, Any], root: dict[str, Any]) -> Any:
    if kind == "object":
        properties = schema.get("properties") or {}
        required = schema.get("required") or list(properties)[: schema.get("minProperties", 0)]
        return {name: minimal_instance(properties.get(name, {}), root) for name in required}
    if kind == "array":
        count = min(schema.get("minItems", 0), _MAX_ITEMS)
        return [minimal_instance(schema.get("items", {}), root) for _ in range(count)]
    if kind in ("integer", "number"):
        step = schema.get("multipleOf", 1)
        low = schema.get("minimum", schema.get("exclusiveMinimum", -step) + step)
        value = -(-low // step) * step if low > 0 else 0
        return int(value) if kind == "integer" else value
    if kind == "boolean":
        return False
    if kind == "null":
        return None
    length = schema.get("minLength", 0)
    if length == 0 and "maxLength" not in schema and "pattern" not in schema and "format" not in schema:
        return _PAD
    return "a" * length


def answer_tokens(schema: dict[str, Any], target: int) -> tuple[bytes, ...]:
    """A JSON answer that ``schema`` accepts, as the simulator's tokens (escaped for a JSON string, as the stream's
    chunk templates take them), padded with words in its first growable string up to ``target`` tokens where it
    can be."""
    instance = json.dumps(minimal_instance(schema), separators=(", ", ": "))
    words = max(target - len(split_tokens(instance.replace(_PAD, ""))), 0)
    if _PAD in instance:
        padding = " ".join(WORDS[index % len(WORDS)] for index in range(words))
        instance = instance.replace(_PAD, padding, 1).replace(_PAD, "")
    return split_tokens(instance)


def json_reply(schema: dict[str, Any], max_tokens: int) -> Reply:
    """The reply to a structured request: the schema's answer and its EOS in max_tokens - 1 tokens (the engine
    checks max_tokens before EOS), cut by max_tokens when even the minimal answer is longer; marked with the schema's
    text for the engine's grammar costs."""
    return Reply(0, answer_tokens(schema, max_tokens - 2), grammar=json.dumps(schema))


class GrammarCache:
    """vLLM's compiled grammars as the engine sees them: when each schema's compile ends, and the mask's cost."""

    def __init__(self, profile: Profile) -> None:
        self.compile_s = profile.grammar_compile_s
        self.mask_s = profile.grammar_mask_s
        self.ready_at: dict[str, float] = {}  # schema text -> engine time its compile ends
        self.compiles = 0

    def compiled_at(self, grammar: str, start: float) -> float:
        """When the grammar of a request the engine core gets at ``start`` is ready (compiled now, or cached)."""
        if grammar not in self.ready_at:
            self.ready_at[grammar] = start + self.compile_s
            self.compiles += 1
        return max(start, self.ready_at[grammar])

    def mask_cost(self, masked: int) -> float:
        """Seconds a step spends filling the bitmasks of its ``masked`` structured sequences."""
        return self.mask_s * masked
