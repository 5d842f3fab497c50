"""An agent task: a script of steps (docs/guides/agents.md), each a model turn — one request, or a fan-out of several
sent at once and joined — whose tool calls the client runs (a sleep of the tool's latency) and answers with ``tool``
messages; the history is carried word for word. ``run_task`` walks the steps with the request sender and the sleep it
is given, and returns the task's record (its ``tasks.csv`` row)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from vllm_stress.client.toolcalls import ToolCallReader
from vllm_stress.core.schema import ABORTED

DEFAULT_SCRIPT: dict[str, Any] = {
    "system": "You are a research agent. Use the tools, then answer briefly.",
    "tools": [
        {
            "name": "search",
            "description": "Search the web",
            "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
            "latency_s": 0.2,
            "result": "Three pages found: the first says the answer is near, the second disagrees.",
        },
        {
            "name": "read_page",
            "description": "Read a web page",
            "parameters": {"type": "object", "properties": {"url": {"type": "string"}}, "required": ["url"]},
            "latency_s": 0.1,
            "result": "The page lists four facts and a table of figures by year.",
        },
    ],
    "steps": [
        {"tool_choice": "required"},
        {"tool_choice": "required"},
        {"fanout": 3, "prompt": "Sub-task {i} of {n}: summarise what was found."},
        {"tool_choice": "none"},
    ],
    "max_tokens": 64,  # room for a call's arguments: one cut short is no call (ToolCallCut)
}


@dataclass(frozen=True)
class Tool:
    name: str
    definition: dict[str, Any]  # what the request's ``tools`` carries
    latency_s: float
    result: str


@dataclass(frozen=True)
class Step:
    tool_choice: Any  # "auto", "required", "none" or a tool's name (a named tool_choice)
    fanout: int  # 0: one request with the history; N: N sub-requests, each the history and its own sub-task
    prompt: str  # a fan-out's sub-task message ({i}, {n})


@dataclass(frozen=True)
class Script:
    system: str
    prompt: str  # the task's first user message ("" : the workload's prompt)
    tools: dict[str, Tool]
    steps: tuple[Step, ...]
    max_tokens: int | None

    def request_tools(self) -> list[dict[str, Any]]:
        return [{"type": "function", "function": tool.definition} for tool in self.tools.values()]

    def tool_choice(self, step: Step) -> Any:
        """The request's ``tool_choice`` for ``step``: a tool's name becomes OpenAI's named choice."""
        if step.tool_choice in ("auto", "required", "none"):
            return step.tool_choice
        return {"type": "function", "function": {"name": step.tool_choice}}

    @property
    def max_fanout(self) -> int:
        return max((step.fanout for step in self.steps), default=0)


def parse_script(raw: dict[str, Any]) -> Script:
    """A task script (JSON's dict); raises ValueError naming what is wrong."""
    tools = {}
    for entry in raw.get("tools") or ():
        definition = {key: entry[key] for key in ("name", "description", "parameters") if key in entry}
        if not isinstance(entry.get("name"), str):
            raise ValueError(f"a tool without a name: {entry!r:.80}")
        result = str(entry.get("result", f"{entry['name']} done."))
        tools[entry["name"]] = Tool(entry["name"], definition, float(entry.get("latency_s", 0.0)), result)
    steps = []
    for number, entry in enumerate(raw.get("steps") or (), 1):
        fanout = int(entry.get("fanout", 0))
        choice = entry.get("tool_choice", "none" if fanout else "auto")  # sub-agents answer, by default
        if choice not in ("auto", "required", "none") and choice not in tools:
            raise ValueError(f"step {number}: tool_choice {choice!r} is neither auto, required, none nor a tool")
        steps.append(Step(choice, fanout, entry.get("prompt", "")))
    if not steps:
        raise ValueError("a task script needs steps")
    return Script(raw.get("system", ""), raw.get("prompt", ""), tools, tuple(steps), raw.get("max_tokens"))


def read_script(path: str) -> Script:
    """The task script in JSON file ``path``, or the default one for ``""``."""
    if not path:
        return parse_script(DEFAULT_SCRIPT)
    with open(path, encoding="utf-8") as f:
        return parse_script(json.load(f))


@dataclass
class Answer:
    """What one request of a step gave: its failure ("" : none), its answer and when it ended."""

    error: str
    reader: ToolCallReader
    start: float  # perf_counter seconds: the request was sent
    end: float  # its answer was read whole
    finish_reason: str = ""


# sends one request: (messages, tool_choice, step number) -> its answer
Send = Callable[[list[dict[str, Any]], Any, int], Answer]
# sends several at once and joins them: [(messages, tool_choice, step number)] -> their answers, in order
SendAll = Callable[[list[tuple[list[dict[str, Any]], Any, int]]], list[Answer]]


@dataclass
class TaskRecord:
    task_id: str
    users: int
    start_wall: float = field(default_factory=time.time)
    start: float = field(default_factory=time.perf_counter)
    end: float | None = None  # perf_counter seconds: its last answer read, or its last tool run
    turns: int = 0
    requests: int = 0
    step_time: float = 0.0  # its steps' seconds, each from its first request's send to its last answer's end
    tool_time: float = 0.0
    tool_call_times: list[float] = field(default_factory=list)  # seconds from the start to each tool call
    failed_step: int | None = None
    error: str = ""

    def fail(self, step: int, error: str) -> None:
        self.failed_step, self.error = step, error

    def cut(self) -> None:
        """The run's stop ended the task mid-way (its request in flight is an Aborted row): neither finished nor
        failed, it ends now with the error Aborted."""
        self.end, self.error = time.perf_counter(), ABORTED

    @property
    def finished(self) -> bool:
        return not self.error

    def answered(self, answers: list[Answer]) -> None:
        """A step's answers are in: the task started with its first request's send and lasts to the latest answer
        (the client's own work before the first send and after the last answer is left out)."""
        if self.end is None:
            self.start_wall += min(a.start for a in answers) - self.start
            self.start = min(a.start for a in answers)
        self.end = max(a.end for a in answers)
        self.step_time += self.end - min(a.start for a in answers)

    @property
    def latency(self) -> float:
        return (self.end if self.end is not None else time.perf_counter()) - self.start

    def row(self, worker: str) -> list[Any]:
        """The ``tasks.csv`` row, in ``vllm_stress.core.schema.TASK_COLUMNS`` order."""
        latency = self.latency
        return [
            self.task_id,
            self.users,
            worker,
            round(self.start_wall, 6),
            round(self.start_wall + latency, 6),
            round(latency, 6),
            self.turns,
            self.requests,
            len(self.tool_call_times),
            round(self.step_time, 6),
            round(self.tool_time, 6),
            ";".join(f"{t:.6f}" for t in self.tool_call_times),
            int(self.finished),
            "" if self.failed_step is None else self.failed_step,
            self.error,
        ]


def opening(script: Script, prompt: str) -> list[dict[str, Any]]:
    """The task's first messages: the script's system message, its prompt (or the workload's ``prompt``)."""
    system = [{"role": "system", "content": script.system}] if script.system else []
    return [*system, {"role": "user", "content": script.prompt or prompt}]


def run_task(
    script: Script,
    record: TaskRecord,
    messages: list[dict[str, Any]],
    send: Send,
    send_all: SendAll,
    sleep: Callable[[float], Any],
) -> TaskRecord:
    """Walk the script's steps from ``messages`` (extended in place: the history) until the last step, a failure, or
    an answer without a tool call under ``tool_choice`` auto; ``record`` gets what happened."""
    for number, step in enumerate(script.steps, 1):
        record.turns = number
        choice = script.tool_choice(step)
        if step.fanout:
            subtasks = [step.prompt.format(i=i, n=step.fanout) for i in range(1, step.fanout + 1)]
            record.requests += len(subtasks)
            answers = send_all([([*messages, {"role": "user", "content": s}], choice, number) for s in subtasks])
            record.answered(answers)
            if error := next((answer.error for answer in answers if answer.error), ""):
                record.fail(number, error)
                break
            joined = "\n".join(f"Sub-agent {i}: {a.reader.text}" for i, a in enumerate(answers, 1))
            messages.append({"role": "user", "content": joined})
            continue
        record.requests += 1
        answer = send(list(messages), choice, number)
        record.answered([answer])
        if answer.error:
            record.fail(number, answer.error)
            break
        messages.append(answer.reader.assistant_message())
        calls = answer.reader.tool_calls()
        if not calls and choice != "auto" and choice != "none":
            record.fail(number, "NoToolCall")
            break
        if error := _run_tools(script, record, answer, messages, sleep):
            record.fail(number, error)
            break
        if not calls and choice == "auto":
            break  # the model answered: the agent is done
    return record


def _run_tools(
    script: Script, record: TaskRecord, answer: Answer, messages: list[dict[str, Any]], sleep: Callable[[float], Any]
) -> str:
    """Run the answer's tool calls in order, each result a ``tool`` message; the first problem's name, or ""."""
    for call in answer.reader.tool_calls():
        problem = call.problem() or ("" if call.name in script.tools else "UnknownTool")
        if problem:
            return "ToolCallCut" if answer.finish_reason == "length" else problem
        record.tool_call_times.append(answer.end - record.start)
        tool = script.tools[call.name]
        began = time.perf_counter()
        sleep(tool.latency_s)
        record.end = time.perf_counter()
        record.tool_time += record.end - began
        messages.append({"role": "tool", "tool_call_id": call.id, "content": tool.result})
    return ""
