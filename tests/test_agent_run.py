"""Agent tasks against the simulator, a whole run: the built-in task (4 turns, 2 tool calls, a fan-out of 3) sends
each step the history the server's request log shows, built from the server's own answers, and each task's latency
is its steps' server time plus its tools' latencies and the client's own work between them (the per-level task
report: test_agents.py)."""

import csv

from vllm_stress.client.agenttask import DEFAULT_SCRIPT
from vllm_stress.core import schema
from vllm_stress.simulator.api.requestlog import read_request_log

QUIET = ["--headless", "--only-summary", "-L", "WARNING"]
RESULTS = {tool["name"]: tool["result"] for tool in DEFAULT_SCRIPT["tools"]}
SUBTASK = DEFAULT_SCRIPT["steps"][2]["prompt"]


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
    residuals = []
    for task in finished:
        assert (task["turns"], task["requests"], task["tool_calls"]) == ("4", "6", "2")
        steps: dict[int, list[dict]] = {}
        for row in rows:
            if row["task_id"] == task["task_id"]:
                assert row["ok"] == "1"
                steps.setdefault(int(row["step"]), []).append(server[row["request_id"]])
        assert sorted((n, len(records)) for n, records in steps.items()) == [(1, 1), (2, 1), (3, 3), (4, 1)]
        check_history(steps)
        # a step lasts from its first request's arrival at the server to its last answer's end there
        step_time = sum(max(r["end"] for r in rs) - min(r["arrival"] for r in rs) for rs in steps.values())
        latency, tools, client_steps = (float(task[k]) for k in ("latency_s", "tool_time_s", "step_time_s"))
        own = latency - client_steps - tools  # the client's own work between steps (the machine's load lengthens it)
        assert own >= 0
        # the task's latency is its steps as the server timed them, its tools and the client's own work, within 5 ms
        residuals.append((latency - step_time - tools, latency - own - step_time - tools))
        assert abs(residuals[-1][1]) < 0.005
        times = [float(t) for t in task["tool_call_s"].split(";")]
        assert 0 < times[0] < times[1] < latency
    print("latency - (server step time + tool time), and less the client's own work too, ms:")
    print([(round(r * 1000, 2), round(s * 1000, 2)) for r, s in residuals])
