"""The agent user: each Locust user runs one agent task at a time (``vllm_stress.client.agenttask``), its fan-outs as
concurrent greenlets; a row per request (with its task and step) and a ``tasks.csv`` row per task started, one the
run's stop cut included (its error Aborted)."""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gevent
from gevent import GreenletExit
from locust import task
from locust.exception import StopUser

from vllm_stress.client.agenttask import Answer, Script, TaskRecord, opening, read_script, run_task
from vllm_stress.client.exchange import Exchange, is_output_delta
from vllm_stress.client.pools import new_session
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.client.sse import SSEParser
from vllm_stress.client.stream import read_body
from vllm_stress.client.toolcalls import ToolCallReader
from vllm_stress.core.failures import failure_name
from vllm_stress.users import chat  # the module, not the class: Locust would run every User class in this file
from vllm_stress.users.base import send_request
from vllm_stress.users.target import TARGETS

if TYPE_CHECKING:
    from geventhttpclient.response import HTTPSocketPoolResponse
    from locust.env import Environment

TASK_NAME = "agent-task"  # the tasks' entry in Locust's statistics (response time = task latency)
_user_numbers = itertools.count(1)
_scripts: dict[str, Script] = {}  # --agent-task path -> script, per process


@dataclass
class TurnSpec(RequestSpec):
    """A step's request: the history it sends and its ``tool_choice``."""

    messages: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"


def task_script(path: str) -> Script:
    if path not in _scripts:
        _scripts[path] = read_script(path)
    return _scripts[path]


class AgentUser(chat.ChatUser):
    """A chat user whose requests are the steps of agent tasks (docs/guides/agents.md)."""

    request_name = "agent"
    output_marker = b"\0"  # no event has it: every event is parsed, so the tool calls and the answer are read
    arrival_starts = None  # a closed loop only: its steps follow answers and tool latencies, no schedule's
    cancellable = False  # --cancel-share cuts no step: a cut step would end its task as failed
    takes_images = False
    takes_canaries = False

    def __init__(self, environment: Environment) -> None:
        self.script = task_script(TARGETS[environment].options.agent_task)
        self.connections = max(1, self.script.max_fanout)  # a fan-out's requests each hold a connection
        super().__init__(environment)
        self.ignore_eos = False  # a tool call ends where its arguments do
        self.readers: dict[Exchange, ToolCallReader] = {}  # the answers being read
        self.read_at: dict[Exchange, float] = {}  # when each streamed answer's last bytes arrived
        # the simulator's tool_choice "auto" rule: the model calls tools while the history holds fewer results
        self.auto_calls = sum(1 for step in self.script.steps if not step.fanout and step.tool_choice != "none")
        self.record: TaskRecord  # the task in progress
        self.number = next(_user_numbers)
        self.tasks_run = itertools.count(1)

    @task
    def agent_task(self) -> None:
        if self.workload is None:  # the target could not be prepared (logged at test start)
            raise StopUser()
        recorder = self.target.recorder
        new_session(self.client, self.target.options.connections)
        record = self.record = TaskRecord(f"{recorder.worker_id}-{self.number}-{next(self.tasks_run)}", recorder.level)
        messages = opening(self.script, self.workload.next_request().text)
        try:
            run_task(self.script, record, messages, self.send_step, self.send_steps, gevent.sleep)
        except GreenletExit:  # the run's stop killed the user mid-task: the task is cut, not failed
            record.cut()
            raise
        except Exception as e:  # a bug of the client's: the task failed at the step it was in
            record.fail(record.turns, failure_name(e))
            raise
        finally:  # every task started has its row, as every request has
            recorder.record_task(record.row(recorder.worker_id))
        self.environment.events.request.fire(
            request_type="TASK",
            name=TASK_NAME,
            response_time=record.latency * 1000,
            response_length=record.requests,
            exception=record.error or None,
            context={},
        )

    def send_step(self, messages: list[dict[str, Any]], tool_choice: Any, step: int) -> Answer:
        """One request of a step, recorded; its answer as read."""
        assert self.workload is not None
        max_tokens = self.script.max_tokens or self.workload.output_length()
        spec = TurnSpec("", None, max_tokens, messages=messages, tool_choice=tool_choice)
        reader = ToolCallReader()
        task_id = self.record.task_id

        def send(turn: RequestSpec, exchange: Exchange) -> None:
            exchange.task_id, exchange.step = task_id, step
            self.readers[exchange] = reader
            try:
                self.send(turn, exchange)
            finally:
                del self.readers[exchange]

        exchange = send_request(self, spec, send)
        end = self.read_at.pop(exchange, None) or time.perf_counter()
        return Answer(exchange.error, reader, exchange.start, end, exchange.finish_reason)

    def send_steps(self, turns: list[tuple[list[dict[str, Any]], Any, int]]) -> list[Answer]:
        """A fan-out: its requests sent at once, each from its own greenlet, joined."""
        greenlets = [gevent.spawn(self.send_step, *turn) for turn in turns]
        try:
            gevent.joinall(greenlets, raise_error=True)
        finally:
            gevent.killall(greenlets)  # the user stopped meanwhile: none runs on without it
        return [greenlet.get() for greenlet in greenlets]

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        assert isinstance(spec, TurnSpec)
        fields = super().body(spec) | {"messages": spec.messages, "tool_choice": spec.tool_choice}
        if self.script.tools:
            fields |= {"tools": self.script.request_tools(), "vllm_xargs": {"tool_calls": self.auto_calls}}
        return fields

    def read_stream(self, stream: HTTPSocketPoolResponse, exchange: Exchange) -> None:
        reader = self.readers[exchange]

        def is_output(choice: dict[str, Any]) -> bool:
            delta = choice.get("delta") or {}
            reader.delta(delta)
            return is_output_delta(delta)

        parser = SSEParser(exchange, self.output_marker, is_output)
        read_body(stream, parser, exchange)
        self.read_at[exchange] = parser.now  # the arrival of the body's last bytes (the kernel's, when it says)

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        super().read_json(response, exchange)
        self.readers[exchange].message((response.get("choices") or [{}])[0].get("message") or {})


AgentUser.tasks = [AgentUser.agent_task]  # not the inherited one-request task of LLMUser
