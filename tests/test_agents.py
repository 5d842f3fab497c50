"""Agent traffic, fast tier: the tool-call reader on vLLM's delta shapes, the simulator's tool-call rule and chunks
read back by it, and the task graph walked with a stand-in sender (the whole run against the simulator:
test_agent_run.py)."""

import csv
import json
import time

import pandas as pd
import pytest

from vllm_stress.analysis.features.tasks import read_tasks, task_blocks, task_levels
from vllm_stress.client.agenttask import Answer, TaskRecord, opening, parse_script, run_task
from vllm_stress.client.toolcalls import ToolCallReader
from vllm_stress.core import schema
from vllm_stress.simulator.api.protocol import ChunkFormat
from vllm_stress.simulator.model.toolcalls import ToolChunks, plan_tool_call

WEATHER = {
    "name": "get_weather",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
}
CLOCK = {"name": "clock", "parameters": {"type": "object", "properties": {}}}
TOOL_SLEEP_SHARE = 0.1  # the stand-in tool really sleeps this share of a tool's latency


def test_reader_joins_fragments_by_index_as_vllm_streams_them():
    reader = ToolCallReader()
    # vLLM's required tool_choice (vllm/tool_parsers/streaming.py): the first entry of a call has its id, type and
    # name, the later ones "name": null and the next arguments; two calls interleave by index; the last delta is {}
    deltas = [
        {"role": "assistant", "content": ""},
        {"tool_calls": [{"id": "a", "type": "function", "index": 0, "function": {"name": "f", "arguments": '{"x'}}]},
        {"tool_calls": [{"index": 0, "function": {"name": None, "arguments": '": 1}'}}]},
        {"tool_calls": [{"id": "b", "type": "function", "index": 1, "function": {"name": "g", "arguments": ""}}]},
        {"tool_calls": [{"index": 1, "function": {"arguments": '{"y": [1, "}"]}'}}]},
        {},
    ]
    for delta in deltas:
        reader.delta(delta)
    calls = reader.tool_calls()
    assert [(c.id, c.name, c.arguments, c.problem()) for c in calls] == [
        ("a", "f", '{"x": 1}', ""),
        ("b", "g", '{"y": [1, "}"]}', ""),
    ]
    assert reader.assistant_message() == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "f", "arguments": '{"x": 1}'}},
            {"id": "b", "type": "function", "function": {"name": "g", "arguments": '{"y": [1, "}"]}'}},
        ],
    }


@pytest.mark.parametrize(("arguments", "problem"), [('{"x": 1', "ToolCallInvalidJSON"), ("[1]", "ToolCallInvalidJSON")])
def test_reader_flags_arguments_that_are_not_a_json_object(arguments, problem):
    reader = ToolCallReader()
    reader.message({"content": None, "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": arguments}}]})
    assert reader.tool_calls()[0].problem() == problem
    reader.message({"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]})
    assert reader.tool_calls()[0].problem() == "ToolCallNoName"


def request(tool_choice, tool_results=0, xargs=None, tools=(WEATHER, CLOCK)):
    messages = [{"role": "user", "content": "go"}]
    messages += [{"role": "tool", "tool_call_id": str(i), "content": "done"} for i in range(tool_results)]
    body = {"messages": messages, "tools": [{"type": "function", "function": t} for t in tools]}
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    return body | ({"vllm_xargs": xargs} if xargs else {})


def test_simulator_rule_decides_which_turn_calls_which_tool():
    assert plan_tool_call(request("none"), 0) is None
    assert plan_tool_call(request("auto", tools=()), 0) is None
    auto = plan_tool_call(request(None), 0)  # no tool_choice is auto: one call by default, the first tool
    assert auto is not None and auto.name == "get_weather" and auto.finish_reason("stop") == "tool_calls"
    assert plan_tool_call(request("auto", tool_results=1), 0) is None  # one result in: the model answers
    second = plan_tool_call(request("auto", tool_results=1, xargs={"tool_calls": 2}), 0)
    assert second is not None and second.name == "clock" and json.loads(second.arguments) == {}
    required = plan_tool_call(request("required", tool_results=5), 0)
    assert required is not None and required.name == "clock"  # tools[5 % 2]
    named = plan_tool_call(request({"type": "function", "function": {"name": "get_weather"}}, 3), 0)
    assert named is not None and named.name == "get_weather" and named.finish_reason("stop") == "stop"
    assert named.finish_reason("length") == "length"
    arguments = json.loads(named.arguments)
    assert set(arguments) == {"city", "days"} and isinstance(arguments["days"], int)
    assert plan_tool_call(request("required"), 7) == plan_tool_call(request("required"), 7)  # seeded


def test_simulator_chunks_read_back_as_the_call_made():
    call = plan_tool_call(request("required"), 1)
    assert call is not None
    fmt = ChunkFormat(True, "m", False, 10)
    fmt.tools = ToolChunks(call)
    tokens = call.reply.tokens
    reader = ToolCallReader()
    events = [fmt.role(0)] + [
        fmt.content(0, tokens[i] if i < len(tokens) else b"", "stop" if i == len(tokens) else None, i, i + 1)
        for i in range(len(tokens) + 1)  # the last token is EOS: no text
    ]
    for event in events:
        choice = json.loads(event.removeprefix(b"data: "))["choices"][0]
        reader.delta(choice["delta"])
    assert choice["finish_reason"] == "tool_calls" and choice["delta"] == {}
    (read,) = reader.tool_calls()
    assert (read.id, read.name, read.arguments) == (fmt.tools.call_id, call.name, call.arguments)
    assert json.loads(read.arguments) == json.loads(call.arguments)


SCRIPT = {
    "system": "sys",
    "tools": [
        {"name": "search", "parameters": {"type": "object"}, "latency_s": 0.25, "result": "found"},
        {"name": "read", "latency_s": 0.5, "result": "read it"},
    ],
    "steps": [
        {"tool_choice": "required"},
        {"tool_choice": "read"},
        {"fanout": 2, "prompt": "part {i} of {n}"},
        {"tool_choice": "none"},
    ],
}


class StandIn:
    """Answers each request from a list of (tool call name or None, arguments, text); keeps what each was sent and
    the tool latencies it was asked to sleep, and sleeps a real tenth of each (TOOL_SLEEP_SHARE)."""

    def __init__(self, answers):
        self.answers = list(answers)
        self.sent = []
        self.slept = []

    def send(self, messages, tool_choice, step):
        sent_at = time.perf_counter()
        self.sent.append((step, tool_choice, json.loads(json.dumps(messages))))
        name, arguments, text = self.answers.pop(0)
        reader = ToolCallReader()
        if name == "FAIL":
            return Answer("HTTP 500", reader, sent_at, time.perf_counter())
        calls = [{"id": f"id{len(self.sent)}", "function": {"name": name, "arguments": arguments}}] if name else []
        reader.message({"content": text, "tool_calls": calls})
        return Answer("", reader, sent_at, time.perf_counter())

    def send_all(self, turns):
        return [self.send(*turn) for turn in turns]

    def sleep(self, seconds):
        self.slept.append(seconds)
        time.sleep(seconds * TOOL_SLEEP_SHARE)


def walk(answers, script=SCRIPT):
    stand_in = StandIn(answers)
    record = TaskRecord("t1", 4)
    run_task(
        parse_script(script),
        record,
        opening(parse_script(script), "hello"),
        stand_in.send,
        stand_in.send_all,
        stand_in.sleep,
    )
    return stand_in, record


def test_task_graph_carries_the_history_word_for_word():
    began = time.perf_counter()
    stand_in, record = walk(
        [("search", '{"q": "a"}', None), ("read", "{}", ""), (None, "", "one"), (None, "", "two"), (None, "", "final")]
    )
    walked = time.perf_counter() - began
    assert stand_in.slept == [0.25, 0.5]
    assert [(step, choice) for step, choice, _ in stand_in.sent] == [
        (1, "required"),
        (2, {"type": "function", "function": {"name": "read"}}),
        (3, "none"),
        (3, "none"),
        (4, "none"),
    ]
    opening_messages = [{"role": "system", "content": "sys"}, {"role": "user", "content": "hello"}]
    first_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "id1", "type": "function", "function": {"name": "search", "arguments": '{"q": "a"}'}}],
    }
    second_call = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "id2", "type": "function", "function": {"name": "read", "arguments": "{}"}}],
    }
    after_tools = [
        *opening_messages,
        first_call,
        {"role": "tool", "tool_call_id": "id1", "content": "found"},
        second_call,
        {"role": "tool", "tool_call_id": "id2", "content": "read it"},
    ]
    assert stand_in.sent[0][2] == opening_messages
    assert stand_in.sent[1][2] == after_tools[:4]
    assert stand_in.sent[2][2] == [*after_tools, {"role": "user", "content": "part 1 of 2"}]
    assert stand_in.sent[3][2] == [*after_tools, {"role": "user", "content": "part 2 of 2"}]
    assert stand_in.sent[4][2] == [*after_tools, {"role": "user", "content": "Sub-agent 1: one\nSub-agent 2: two"}]
    row = dict(
        zip(
            ["turns", "requests", "tool_calls", "finished", "failed_step", "error"],
            record.row("w")[6:9] + record.row("w")[12:],
            strict=True,
        )
    )
    assert row == {"turns": 4, "requests": 5, "tool_calls": 2, "finished": 1, "failed_step": "", "error": ""}
    # the tools' time holds both real sleeps (25 ms and 50 ms) and nothing outside the walk; the first call came
    # after the first answer, and the second after the first tool's sleep
    assert 0.75 * TOOL_SLEEP_SHARE <= record.tool_time <= walked
    first_at, second_at = record.tool_call_times
    assert second_at - first_at >= 0.25 * TOOL_SLEEP_SHARE


@pytest.mark.parametrize(
    ("answers", "failed_step", "error", "requests"),
    [
        ([(None, "", "no call")], 1, "NoToolCall", 1),
        ([("search", '{"q": ', None)], 1, "ToolCallInvalidJSON", 1),
        ([("nope", "{}", None)], 1, "UnknownTool", 1),
        ([("search", "{}", None), ("read", "{}", None), (None, "", "a"), ("FAIL", "", "")], 3, "HTTP 500", 4),
    ],
)
def test_task_graph_fails_at_its_step(answers, failed_step, error, requests):
    _, record = walk(answers)
    assert (record.failed_step, record.error, record.requests) == (failed_step, error, requests)
    assert record.row("w")[12:] == [0, failed_step, error]


def test_auto_step_without_a_call_ends_the_task_finished():
    script = SCRIPT | {"steps": [{"tool_choice": "auto"}, {"tool_choice": "auto"}, {"tool_choice": "auto"}]}
    stand_in, record = walk([("search", "{}", None), (None, "", "done")], script)
    assert (record.turns, record.requests, record.failed_step, len(stand_in.sent)) == (2, 2, None, 2)


def test_script_errors_name_the_step():
    with pytest.raises(ValueError, match="step 2: tool_choice 'missing'"):
        parse_script(SCRIPT | {"steps": [{}, {"tool_choice": "missing"}]})
    with pytest.raises(ValueError, match="needs steps"):
        parse_script({"tools": []})


def write_tasks(folder, rows):
    folder.mkdir()
    with open(folder / schema.TASKS_FILE, "w", newline="", encoding="utf-8") as f:
        csv.writer(f).writerows([schema.TASK_COLUMNS, *rows])
    return folder


def task_row(task_id, users, start, latency, first_call, failed_step="", cut=False):
    calls = "" if first_call is None else f"{first_call};{first_call + 0.1}"
    error = schema.ABORTED if cut else "HTTP 500" if failed_step else ""
    return [task_id, users, "w", start, start + latency, latency, 4, 6, 2, latency / 2, 0.3, calls,
            int(not error), failed_step, error]  # fmt: skip


def windows(*rows):
    return pd.DataFrame(rows, columns=["users", "start", "end"])


def test_task_levels_count_the_tasks_ended_in_their_levels_window(tmp_path):
    # level 2's window is [100, 110) s in both runs: 4 tasks of r1 end inside it (one failed at step 3), one ends in
    # its ramp and one after it, and one the stop cut (ended after the window) counts apart; r2's one task ends inside
    level_2 = [task_row(f"a{i}", 2, 100 + 2 * i, 1.0 + i, 0.2 + i / 10) for i in range(3)]
    level_2 += [task_row("a3", 2, 105, 2.0, 0.4, failed_step=3), task_row("a4", 2, 109, 5.0, None)]
    level_2 += [task_row("ramp", 2, 98, 1.5, 0.1), task_row("a5", 2, 109, 5.0, 0.3, cut=True)]
    r1 = read_tasks(write_tasks(tmp_path / "r1", level_2), windows((2, 100, 110)))
    r2 = write_tasks(
        tmp_path / "r2",
        [task_row("c0", 2, 100, 6.0, 0.6), *(task_row(f"b{i}", 4, 10 + i, 2.0 + i, 0.5) for i in (0, 1))],
    )
    levels = task_levels(r1 + read_tasks(r2, windows((2, 100, 110), (4, 10, 15))) + read_tasks(tmp_path, windows()))
    two, four = levels
    assert two["users"] == 2 and (two["tasks"], two["cut"]) == (6, 1) and two["tasks_per_s"] == pytest.approx(5 / 20)
    assert two["latency_p50_s"] == pytest.approx(2.5) and two["latency_p99_s"] == pytest.approx(5.91)  # 1, 2, 3, 6
    assert two["first_tool_call_p50_s"] == pytest.approx(0.4) and two["finished"] == pytest.approx(0.8)
    assert two["failed_steps"] == {"3": 1}
    assert four["tasks_per_s"] == pytest.approx(2 / 5) and four["failed_steps"] == {}  # ended at 12 and 14 s
    table = task_blocks("cfg", levels)[-1]
    assert table.rows[0][-3:] == ["1", "80.0 %", "step 3: 1"]
    assert task_blocks("cfg", []) == []
