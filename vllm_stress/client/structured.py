"""Structured outputs (--json-schema): which requests carry a JSON schema, how vLLM takes it, and whether each answer
is valid, invalid or cut (docs/guides/structured-outputs.md).

vLLM compiles a schema's grammar on its first request and caches it keyed by the schema's text
(``vllm/v1/structured_output/backend_xgrammar.py``: xgrammar's ``GrammarCompiler`` with its cache on), so a pool
schema sent again is cached and a variant with a renamed property (--json-schema-new-share) is compiled afresh.

A structured request is sent without ``ignore_eos``/``min_tokens``: the grammar allows only EOS once the JSON is
complete, which ``ignore_eos`` would skip and ``min_tokens`` would mask, so the output length target is only
``max_tokens``."""

from __future__ import annotations

import copy
import json
import random
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

VALID, INVALID, CUT = "valid", "invalid", "cut"  # requests.csv answer_valid (empty: no schema, or the request failed)
_NAME = re.compile(r"[^A-Za-z0-9_-]+")


@dataclass(frozen=True)
class JsonSchema:
    """One request's schema: its id (requests.csv schema_id), its body, whether this process sent it first now."""

    id: str
    body: dict[str, Any]
    first_use: bool


def read_schemas(path: str) -> list[tuple[str, dict[str, Any]]]:
    """[(id, schema)] of a JSON file, or of a folder's ``*.json`` files (by name); ValueError for what is not a
    valid JSON schema."""
    # imported on first use (docs/contributing.md, "Imports")
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    folder = Path(path)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else [folder]
    if not files:
        raise ValueError(f"{path}: no *.json file in the folder")
    schemas = []
    for file in files:
        try:
            body = json.loads(file.read_text(encoding="utf-8"))
            validator_for(body).check_schema(body)
        except (OSError, ValueError, SchemaError) as e:
            raise ValueError(f"{file}: {str(e).splitlines()[0]}") from None
        if not isinstance(body, dict):
            raise ValueError(f"{file}: a schema must be a JSON object")
        schemas.append((_NAME.sub("_", file.stem)[:48] or "schema", body))
    return schemas


def renamed(body: dict[str, Any], new_name: str) -> dict[str, Any]:
    """The schema with its first top-level property renamed ``new_name`` (in ``required`` too)."""
    properties = body.get("properties")
    if not isinstance(properties, dict) or not properties:
        raise ValueError("--json-schema-new-share renames a top-level property: the schema has none")
    old = next(iter(properties))
    variant = copy.deepcopy(body)
    variant["properties"] = {new_name if name == old else name: value for name, value in properties.items()}
    if isinstance(body.get("required"), list):
        variant["required"] = [new_name if name == old else name for name in body["required"]]
    return variant


class SchemaPool:
    """Draws each request's schema: ``share`` of the requests carry one; of those ``new_share`` a new variant of a
    pool schema (a property renamed), the rest the pool's schemas in turn."""

    def __init__(self, schemas: list[tuple[str, dict[str, Any]]], share: float, new_share: float, seed: int) -> None:
        for flag, value in (("--json-schema-share", share), ("--json-schema-new-share", new_share)):
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{flag} must be between 0 and 1, got {value:g}")
        if new_share:
            for _, body in schemas:
                renamed(body, "")  # a ValueError now for a schema that has no property to rename
        self.schemas = schemas
        self.share = share
        self.new_share = new_share
        self._rng = random.Random(seed)
        self._turn = 0
        self._variants = 0
        self._sent: set[str] = set()
        # the new variants' names differ between load-generating processes and runs: drawn here, not at import, which
        # a master's forked workers share (docs/concepts/locust.md §3)
        self._token = secrets.token_hex(3)

    def next(self) -> JsonSchema | None:
        """The next request's schema, or None for an unconstrained request."""
        if self._rng.random() >= self.share:
            return None
        name, body = self.schemas[self._turn % len(self.schemas)]
        self._turn += 1
        if self._rng.random() < self.new_share:
            self._variants += 1
            name = f"{name}-{self._token}{self._variants}"
            body = renamed(body, f"{next(iter(body['properties']))}_{self._token}{self._variants}")
        first = name not in self._sent
        self._sent.add(name)
        return JsonSchema(name, body, first)


def load_pool(options: Any, seed: int) -> SchemaPool | None:
    """The pool of --json-schema (None without it); ValueError for a bad file or share."""
    if not options.json_schema:
        return None
    return SchemaPool(read_schemas(options.json_schema), options.json_schema_share, options.json_schema_new_share, seed)


def chat_fields(schema: JsonSchema) -> dict[str, Any]:
    """A chat request's fields for the schema: OpenAI's ``response_format`` as vLLM reads it."""
    return {"response_format": {"type": "json_schema", "json_schema": {"name": schema.id, "schema": schema.body}}}


def completion_fields(schema: JsonSchema) -> dict[str, Any]:
    """A completions request's fields for the schema: vLLM's own ``structured_outputs`` (``json``)."""
    return {"structured_outputs": {"json": schema.body}}


_validators: dict[str, Any] = {}  # schema id -> its validator
MAX_VALIDATORS = 1000  # bounds the cache: new variants are used once


def judge(schema: JsonSchema, text: str, finish_reason: str) -> str:
    """VALID when ``text`` is JSON that the schema accepts, else CUT when max_tokens ended it (finish_reason
    ``length``), else INVALID."""
    validator = _validators.get(schema.id)
    if validator is None:
        if len(_validators) >= MAX_VALIDATORS:
            _validators.clear()
        from jsonschema.validators import validator_for

        validator = _validators[schema.id] = validator_for(schema.body)(schema.body)
    try:
        if validator.is_valid(json.loads(text)):
            return VALID
    except ValueError:
        pass
    return CUT if finish_reason == "length" else INVALID
