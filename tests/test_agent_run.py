"""Agent tasks against the simulator, a whole run: the built-in task (4 turns, 2 tool calls, a fan-out of 3) sends
each step the history the server's request log shows, built from the server's own answers, and each task's step and
tool times are bounded by the server's record: its steps last at least as long as the server took, and its tools
sleep their latencies between one step's answer and the next step's arrival there (the per-level task report:
test_agents.py)."""

import csv

from vllm_stress.client.agenttask import DEFAULT_SCRIPT
from vllm_stress.core import schema
from vllm_stress.simulator.api.requestlog import read_request_log

QUIET = ["--headless", "--only-summary", "-L", "WARNING"]
RESULTS = {tool["name"]: tool["result"] for tool in DEFAULT_SCRIPT["tools"]}
SUBTASK = DEFAULT_SCRIPT["steps"][2]["prompt"]
LATENCY = {tool["name"]: tool["latency_s"] for tool in DEFAULT_SCRIPT["tools"]}


def read_csv(path):
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def called(record: dict) -> list[dict]:
    """The history a step after ``record``'s tool call adds: the call as the server made it, and the tool's result."""
    call = record["tool_call"]
    entry = {"id": call["id"], "type": "function", "function": {"name": call["name"], "arguments": record["answer"]}}
    return [
        {"role": "assistant", "content": None, "tool_calls": [entry]},
        {"role": "tool", "tool_call_id": call["id"], "content": RESULTS[call["name"]]},
    ]


def check_history(steps: dict[int, list[dict]]) -> None:
    """Every step's messages, as the server logged them, are the previous step's plus what its answers added."""
    (first,), (second,), fanout, (last,) = (steps[number] for number in (1, 2, 3, 4))
    assert [m["role"] for m in first["messages"]] == ["system", "user"]
    assert second["messages"] == first["messages"] + called(first)
    history = second["messages"] + called(second)
    by_subtask = {record["messages"][-1]["content"]: record for record in fanout}
    assert sorted(by_subtask) == [SUBTASK.format(i=i, n=3) for i in (1, 2, 3)]
    for subtask, record in by_subtask.items():
        assert record["messages"] == [*history, {"role": "user", "content": subtask}] and record["tool_call"] is None
    joined = "\n".join(f"Sub-agent {i}: {by_subtask[SUBTASK.format(i=i, n=3)]['answer']}" for i in (1, 2, 3))
    assert last["messages"] == [*history, {"role": "user", "content": joined}]


def test_agent_tasks_carry_the_servers_answers_and_time_as_their_steps_and_tools(simulator, run_locust, tmp_path):
    log = tmp_path / "requests.jsonl"
    sim = simulator("--request-log", str(log))
    out = tmp_path / "run"
    args = ["-f", "locustfiles/agent.py", "-H", sim.url, "-u", "1", "-r", "1", "-t", "5s", "--stop-timeout", "20"]
    proc = run_locust(*args, "--results-dir", str(out), *QUIET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()  # its request log is flushed as it stops
    server = read_request_log(str(log))
    rows = read_csv(out / schema.REQUESTS_FILE)
    tasks = read_csv(out / schema.TASKS_FILE)
    finished = [task for task in tasks if task["finished"] == "1"]
    assert len(finished) >= 3 and len(finished) == len(tasks)  # the stop lets the task in flight finish
    margins = []
    for task in finished:
        assert (task["turns"], task["requests"], task["tool_calls"]) == ("4", "6", "2")
        steps: dict[int, list[dict]] = {}
        for row in rows:
            if row["task_id"] == task["task_id"]:
                assert row["ok"] == "1"
                steps.setdefault(int(row["step"]), []).append(server[row["request_id"]])
        assert sorted((n, len(records)) for n, records in steps.items()) == [(1, 1), (2, 1), (3, 3), (4, 1)]
        check_history(steps)
        latency, tools, client_steps = (float(task[k]) for k in ("latency_s", "tool_time_s", "step_time_s"))
        # the server's record bounds the client's: a request arrived there after the client sent it and its last
        # output was written before the client read it, so a step spanned at least (first arrival, last write) ...
        spans = {n: (min(r["arrival"] for r in rs), max(r["last"] for r in rs)) for n, rs in steps.items()}
        assert client_steps >= sum(last - arrival for arrival, last in spans.values())
        # ... and each tool, a real sleep of its latency, ran between its step's answer and the next step's arrival
        gaps = [spans[n + 1][0] - spans[n][1] for n in (1, 2)]
        asked = [LATENCY[steps[n][0]["tool_call"]["name"]] for n in (1, 2)]
        assert all(gap >= wanted for gap, wanted in zip(gaps, asked, strict=True)), (gaps, asked)
        assert sum(asked) <= tools <= sum(gaps)
        assert client_steps + tools <= latency  # the steps and the tools are apart within the task
        times = [float(t) for t in task["tool_call_s"].split(";")]
        assert times[1] - times[0] >= asked[0] and times[1] < latency  # the second call came after the first tool
        margins.append((client_steps - sum(last - arrival for arrival, last in spans.values()), sum(gaps) - tools))
    print("client step time - server step time, server gaps - tool time, ms:")
    print([(round(steps * 1000, 2), round(gaps * 1000, 2)) for steps, gaps in margins])


def test_a_task_the_stop_cuts_has_its_row_marked_cut(simulator, run_locust, tmp_path):
    """Without --stop-timeout the run's end kills each user mid-task: every task started, the cut ones too, has its
    tasks.csv row, each with as many requests as requests.csv has rows for it, and every request the server saw
    belongs to a task that has one."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--request-log", str(log))
    out = tmp_path / "run"
    args = ["-f", "locustfiles/agent.py", "-H", sim.url, "-u", "2", "-r", "2", "-t", "3s"]
    proc = run_locust(*args, "--results-dir", str(out), *QUIET)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()  # its request log is flushed as it stops
    server = read_request_log(str(log))
    rows = read_csv(out / schema.REQUESTS_FILE)
    tasks = {task["task_id"]: task for task in read_csv(out / schema.TASKS_FILE)}
    by_id = {row["request_id"]: row for row in rows}
    assert set(server) <= set(by_id)  # every request the server saw has its row ...
    assert {by_id[request_id]["task_id"] for request_id in server} <= set(tasks)  # ... and its task its task row
    cut = [task for task in tasks.values() if task["error"] == schema.ABORTED]
    assert 1 <= len(cut) <= 2  # a user is cut in its task, never between two
    for task in tasks.values():
        steps = [row for row in rows if row["task_id"] == task["task_id"]]
        assert int(task["requests"]) == len(steps) and int(task["turns"]) == max(int(row["step"]) for row in steps)
    for task in cut:
        assert (task["finished"], task["failed_step"]) == ("0", "")  # cut, not failed
        steps = [row for row in rows if row["task_id"] == task["task_id"]]
        assert all(row["ok"] == "1" or row["error"] == schema.ABORTED for row in steps)
    print("cut tasks (turns, requests, Aborted rows):")
    print([(t["turns"], t["requests"], sum(r["error"] == schema.ABORTED for r in rows if r["task_id"] == t["task_id"]))
           for t in cut])  # fmt: skip
