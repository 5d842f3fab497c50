"""Agent tasks (tasks.csv) per level: tasks per second, task latency p50/p99, time to the first tool call and the share
of tasks that finished, with the steps the others failed at (docs/guides/agents.md).

A task counts at the level it started at, and like a request (``levels.ended_in_windows``) only when it ended in that
level's window (``levels.level_windows``): every figure is of those tasks, tasks per second over the windows'
length (summed over a config's runs). Latencies are those of finished tasks. A task the run's stop cut (error
Aborted) ends after every window: it is counted apart, at the level it started at, neither finished nor failed."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import TypedDict

import numpy as np
import pandas as pd

from vllm_stress.analysis.measures import ended_in_windows, records
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.metrics import percentile
from vllm_stress.core.numbers import percent
from vllm_stress.core.schema import ABORTED, TASKS_FILE

TASK_NOTE = (
    "A task is an agent's whole job: its model turns, the tool calls the client ran and their latencies. Its latency "
    "is what the agent's user waits for; the first tool call comes when the first turn's answer is whole. A level's "
    "tasks are those that started at it and ended in its steady-state window; a task the run's stop cut is counted "
    "apart (cut by stop), outside the rate, the latencies and the finished share."
)
TaskRow = dict[str, str]  # a tasks.csv row as text, with its run folder ("run") and its level's "window_s"


class TaskLevel(TypedDict):
    users: int
    tasks: int  # tasks started at this level and ended in its window (finished or not), and those cut
    cut: int  # of those, the tasks the run's stop cut (error Aborted)
    tasks_per_s: float | None
    latency_p50_s: float | None  # of finished tasks
    latency_p99_s: float | None
    first_tool_call_p50_s: float | None  # from the task's start to its first tool call, tasks not cut that made one
    finished: float | None  # share of the tasks not cut that finished (None: every one was cut)
    failed_steps: dict[str, int]  # step -> tasks that failed there


def read_tasks(folder: Path, windows: pd.DataFrame) -> list[TaskRow]:
    """The run folder's tasks that ended in their level's window (``windows``: the run's ``level_windows``) and those
    the run's stop cut; [] without tasks.csv."""
    if not (folder / TASKS_FILE).is_file():
        return []
    tasks = pd.read_csv(folder / TASKS_FILE, dtype=str, keep_default_na=False)
    times = pd.DataFrame({"users": tasks["users"].astype("int64"), "end_time": tasks["end_time"].astype(float)})
    window_s = dict(zip(windows["users"], windows["end"] - windows["start"], strict=True))
    kept = tasks.index.isin(ended_in_windows(times, windows).index) | (tasks["error"] == ABORTED)
    ended = records(tasks[kept & tasks["users"].astype("int64").isin(window_s)])
    return [row | {"run": str(folder), "window_s": str(window_s[int(row["users"])])} for row in ended]


def _p(values: list[float], q: float) -> float | None:
    value = percentile(np.array(values, dtype=float), q)
    return None if np.isnan(value) else value


def _rate(rows: list[TaskRow]) -> float | None:
    """Tasks per second of one level's rows: their count over the length of their runs' windows."""
    span = sum({row["run"]: float(row["window_s"]) for row in rows}.values())
    return len(rows) / span if span > 0 else None


def task_levels(rows: list[TaskRow]) -> list[TaskLevel]:
    """Per level (ascending) the figures of its tasks (``read_tasks`` of a config's runs); empty without tasks."""
    by_level: dict[int, list[TaskRow]] = defaultdict(list)
    for row in rows:
        by_level[int(row["users"])].append(row)
    levels: list[TaskLevel] = []
    for users in sorted(by_level):
        level = by_level[users]
        ran = [row for row in level if row["error"] != ABORTED]  # to their end, or to a failure
        finished = [float(row["latency_s"]) for row in ran if row["finished"] == "1"]
        first_calls = [float(row["tool_call_s"].split(";")[0]) for row in ran if row["tool_call_s"]]
        failed = Counter(row["failed_step"] for row in ran if row["finished"] != "1")
        levels.append(
            {
                "users": users,
                "tasks": len(level),
                "cut": len(level) - len(ran),
                "tasks_per_s": _rate(ran) if ran else None,
                "latency_p50_s": _p(finished, 50),
                "latency_p99_s": _p(finished, 99),
                "first_tool_call_p50_s": _p(first_calls, 50),
                "finished": len(finished) / len(ran) if ran else None,
                "failed_steps": dict(sorted(failed.items())),
            }
        )
    return levels


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def task_blocks(label: str, levels: list[TaskLevel]) -> list[Block]:
    """The per-level task table of a config; [] without tasks."""
    if not levels:
        return []
    rows = [
        [
            str(level["users"]),
            str(level["tasks"]),
            "" if level["tasks_per_s"] is None else f"{level['tasks_per_s']:.2f}",
            _seconds(level["latency_p50_s"]),
            _seconds(level["latency_p99_s"]),
            _seconds(level["first_tool_call_p50_s"]),
            str(level["cut"]),
            "" if level["finished"] is None else percent(level["finished"]),
            ", ".join(f"step {step}: {count}" for step, count in level["failed_steps"].items()),
        ]
        for level in levels
    ]
    headers = ["users", "tasks", "tasks/s", "latency p50 s", "p99 s", "first tool call p50 s", "cut by stop"]
    headers += ["finished", "failed at"]
    return [Heading(f"Agent tasks: {label}"), Paragraph(TASK_NOTE), Table(headers, rows)]
