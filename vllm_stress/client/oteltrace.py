"""OpenTelemetry agent traces (``--session-trace``) exported as OTLP/JSON, as the OpenTelemetry Collector's file
exporter and the OTLP/HTTP JSON encoding write them: each trace one recorded session, its LLM calls the turns, its
child agents subagent sessions.

A file holds one export (an object with ``resourceSpans``, each ``scopeSpans[].spans[]``) or one a line. A span has
``traceId``, ``spanId``, ``parentSpanId``, ``name``, ``startTimeUnixNano``, ``endTimeUnixNano`` and ``attributes``
(``[{key, value: {stringValue | intValue | doubleValue | boolValue}}]``), read by the OpenTelemetry GenAI semantic
conventions: an LLM call is a span whose ``gen_ai.operation.name`` is chat, text_completion or generate_content (or,
without one, that has usage tokens); its prompt and answer are ``gen_ai.usage.input_tokens`` and
``gen_ai.usage.output_tokens`` (the older ``prompt_tokens`` and ``completion_tokens`` too). An agent is an
``invoke_agent`` span: a call belongs to its nearest agent, the outermost agents (and a trace without any) being the
session itself; an agent under another is a subagent of it (its session id ``gen_ai.agent.name``, numbered when
siblings share it). A session's turns are its calls in start order, each one's gap the time from the previous call's
end (to its fan-out's launch, when there is one; a first call has none). The subagents launched between two calls
are the later call's fan-out, launched together; the call waits for those that had ended when it started (the
join) and not for the others; those launched after the last call are waited for at the session's end. Traces keep
no text: each conversation's prompts are a growing history (tracehistory.py). Tool spans, other spans and traces
without an LLM call are left out.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .sessionmodel import RecordedSession, RecordedTurn
from .tracehistory import HISTORY_BLOCK_TOKENS, GrowingHistory
from .tracejson import JsonText, json_documents, reason

CALL_OPERATIONS = {"chat", "text_completion", "generate_content"}
AGENT_OPERATION = "invoke_agent"
INPUT_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
SESSION = ""  # the node of a trace's own calls (its subagents' nodes: their agent spans' ids)
NANOS = 1e9


@dataclass(frozen=True)
class Span:
    where: str  # file, line and place in its export, for errors
    trace_id: str
    span_id: str
    parent_id: str
    name: str
    start: int  # ns
    end: int
    attributes: dict[str, Any]

    @property
    def operation(self) -> str | None:
        return self.attributes.get("gen_ai.operation.name")

    @property
    def is_agent(self) -> bool:
        return self.operation == AGENT_OPERATION

    @property
    def is_call(self) -> bool:
        if self.operation is None:
            return any(key in self.attributes for key in INPUT_KEYS + OUTPUT_KEYS)
        return self.operation in CALL_OPERATIONS

    def usage(self) -> tuple[int, int]:
        """A call's input and output tokens; ValueError naming the span when either is missing or below 1."""
        try:
            return tokens(self.attributes, INPUT_KEYS), tokens(self.attributes, OUTPUT_KEYS)
        except ValueError as e:
            raise ValueError(f"{self.where}: span {self.name!r}: {e}") from None


def otel_sessions(trace: JsonText) -> list[RecordedSession] | None:
    """The traces of a file's text (one OTLP/JSON export, or one a line) as sessions, in the order they first
    appear; None when its first JSON value is not an export (an object with ``resourceSpans``)."""
    exports = json_documents(trace, lambda item: isinstance(item, dict) and "resourceSpans" in item)
    if exports is None:
        return None
    traces: dict[str, list[Span]] = {}
    for where, export in exports:
        for span in read_spans(where, export):
            traces.setdefault(span.trace_id, []).append(span)
    sessions = [session for spans in traces.values() if (session := trace_session(spans))]
    if not sessions:
        raise ValueError(f"{trace.path}: no LLM call (a chat span with gen_ai.usage tokens) in its traces")
    return sessions


def read_spans(where: str, export: Any) -> list[Span]:
    """The spans of one export; ValueError ``where: resourceSpans[i]...: ...`` for one that is not a span."""
    if not isinstance(export, dict) or "resourceSpans" not in export:
        raise ValueError(f"{where}: not an OTLP/JSON export (an object with resourceSpans)")
    spans = []
    for i, resource in enumerate(listed(where, "resourceSpans", export)):
        for j, scope in enumerate(listed(where, f"resourceSpans[{i}].scopeSpans", resource)):
            at = f"resourceSpans[{i}].scopeSpans[{j}].spans"
            spans += [read_span(f"{where}: {at}[{k}]", raw) for k, raw in enumerate(listed(where, at, scope))]
    return spans


def listed(where: str, at: str, item: Any) -> list:
    """The list at ``at``'s last key of ``item`` (none: empty)."""
    value = item.get(at.rsplit(".", 1)[-1], []) if isinstance(item, dict) else None
    if not isinstance(value, list):
        raise ValueError(f"{where}: {at}: a list expected")
    return value


def read_span(where: str, raw: Any) -> Span:
    try:
        if not isinstance(raw, dict):
            raise TypeError(f"an object expected, not {type(raw).__name__}")
        start, end = nanos(raw, "startTimeUnixNano"), nanos(raw, "endTimeUnixNano")
        if end < start:
            raise ValueError("endTimeUnixNano is before startTimeUnixNano")
        trace_id, span_id, parent_id = raw["traceId"], raw["spanId"], raw.get("parentSpanId") or ""
        if not all(isinstance(value, str) for value in (trace_id, span_id, parent_id)) or not trace_id or not span_id:
            raise ValueError(f"traceId, spanId and parentSpanId must be text, not {[trace_id, span_id, parent_id]!r}")
        name, attrs = str(raw.get("name", "")), attributes(raw.get("attributes") or [])
        return Span(where, trace_id, span_id, parent_id, name, start, end, attrs)
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"{where}: {reason(e)}") from None


def nanos(raw: dict, key: str) -> int:
    """A time in ns since the epoch: a whole number, as text (OTLP/JSON's 64-bit integers) or not."""
    value = raw[key]
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise ValueError(f"{key} must be a whole number of ns, not {value!r}")
    return int(value)


def attributes(items: Any) -> dict[str, Any]:
    """OTLP key-value attributes as a dict: each value its ``stringValue``, ``intValue`` (an int), ``doubleValue``
    or ``boolValue`` (another kind kept as it is)."""
    if not isinstance(items, list) or not all(isinstance(item, dict) and "key" in item for item in items):
        raise ValueError("attributes must be a list of {key, value}")
    return {item["key"]: any_value(item.get("value") or {}) for item in items}


def any_value(value: dict) -> Any:
    if "intValue" in value:
        return int(value["intValue"])
    for kind in ("stringValue", "doubleValue", "boolValue"):
        if kind in value:
            return value[kind]
    return value


def tokens(attrs: dict[str, Any], keys: tuple[str, ...]) -> int:
    """The first of ``keys`` the attributes have: a whole number of at least 1."""
    key = next((key for key in keys if key in attrs), keys[0])
    value = attrs.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{key} must be a whole number of at least 1, not {value!r}")
    return value


def trace_session(spans: list[Span]) -> RecordedSession | None:
    """One trace as a session (None: it has no LLM call); ValueError when its calls are all its subagents'."""
    by_id = {span.span_id: span for span in spans}
    calls: dict[str, list[Span]] = {}
    agents: dict[str, list[Span]] = {}  # the subagents each node launches
    for span in spans:
        if span.is_call:
            span.usage()  # checked, wherever it is
            calls.setdefault(node_of(span, by_id), []).append(span)
        elif span.is_agent and agent_above(span, by_id):
            agents.setdefault(node_of(span, by_id), []).append(span)
    if not calls:
        return None
    first = min(spans, key=lambda span: span.start)
    if SESSION not in calls:
        raise ValueError(f"{first.where}: trace {first.trace_id!r}: no LLM call of its own, only its subagents'")
    ids = itertools.count()
    return agent_session(SESSION, first.trace_id, calls, agents, ids, f"{first.trace_id}-")


def agent_above(span: Span, by_id: dict[str, Span]) -> Span | None:
    """The nearest agent span among ``span``'s ancestors (a parent the trace lacks ends the chain)."""
    seen = {span.span_id}
    parent = by_id.get(span.parent_id)
    while parent is not None and parent.span_id not in seen:  # (a cycle of parents ends too)
        if parent.is_agent:
            return parent
        seen.add(parent.span_id)
        parent = by_id.get(parent.parent_id)
    return None


def node_of(span: Span, by_id: dict[str, Span]) -> str:
    """The node ``span`` is part of: the subagent it is under, or the session (an outermost agent, or none)."""
    agent = agent_above(span, by_id)
    return SESSION if agent is None or agent_above(agent, by_id) is None else agent.span_id


def agent_session(
    node: str,
    session_id: str,
    calls: dict[str, list[Span]],
    agents: dict[str, list[Span]],
    ids: Iterator[int],
    salt: str,
    awaited: bool = True,
) -> RecordedSession:
    """A node's calls as a session's turns, each with the fan-out of the subagents launched before it."""
    pending = sorted(agents.get(node, []), key=lambda span: span.start)
    names = agent_names(pending)
    history = GrowingHistory(ids)
    turns: list[RecordedTurn] = []
    previous: Span | None = None

    def launch(agent: Span, joined: bool) -> RecordedSession:
        return agent_session(agent.span_id, names[agent.span_id], calls, agents, ids, salt, joined)

    for call in sorted(calls.get(node, []), key=lambda span: (span.start, span.end)):
        launched = [agent for agent in pending if agent.start <= call.start]
        pending = pending[len(launched) :]
        fanout = tuple(launch(agent, agent.end <= call.start) for agent in launched)
        begins = min([call.start, *(agent.start for agent in launched)])
        gap = 0.0 if previous is None else max(begins - previous.end, 0) / NANOS
        input_tokens, output_tokens = call.usage()
        hash_ids, reused = history.grown(input_tokens)
        history.answer(output_tokens)
        turns.append(RecordedTurn(input_tokens, output_tokens, hash_ids, gap, reused, without_empty(fanout)))
        previous = call
    after = without_empty(tuple(launch(agent, True) for agent in pending))
    return RecordedSession(session_id, tuple(turns), HISTORY_BLOCK_TOKENS, salt, after, awaited)


def without_empty(agents: tuple[RecordedSession, ...]) -> tuple[RecordedSession, ...]:
    """The subagents that send something (one without a call, nor subagents of its own, sends nothing)."""
    return tuple(agent for agent in agents if agent.turns or agent.after)


def agent_names(agents: list[Span]) -> dict[str, str]:
    """Sibling agents' session ids: ``gen_ai.agent.name`` (else ``gen_ai.agent.id``, else the span's name) without
    slashes, numbered from 1 in start order when siblings share it."""
    named = {agent.span_id: agent_name(agent) for agent in agents}
    counts = {name: list(named.values()).count(name) for name in named.values()}
    numbers: dict[str, int] = {}
    for span_id, name in named.items():
        if counts[name] > 1:
            numbers[name] = numbers.get(name, 0) + 1
            named[span_id] = f"{name}-{numbers[name]}"
    return named


def agent_name(agent: Span) -> str:
    attrs = agent.attributes
    name = attrs.get("gen_ai.agent.name") or attrs.get("gen_ai.agent.id") or agent.name or agent.span_id
    return str(name).replace("/", "-")
