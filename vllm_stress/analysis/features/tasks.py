"""Agent tasks (tasks.csv) per level: tasks per second, task latency p50/p99, time to the first tool call and the share
of tasks that finished, with the steps the others failed at (docs/guides/agents.md).

A task counts at the level it started at. Tasks per second are the level's tasks that ended in its hold
(levels.csv) over the hold's length; without levels.csv, over the span from its first task's start to its last
one's end. Latencies are those of finished tasks."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from pathlib import Path
from typing import TypedDict

import numpy as np

from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.metrics import percentile
from vllm_stress.core.numbers import percent
from vllm_stress.core.schema import LEVELS_FILE, TASKS_FILE

TASK_NOTE = (
    "A task is an agent's whole job: its model turns, the tool calls the client ran and their latencies. Its latency "
    "is what the agent's user waits for; the first tool call comes when the first turn's answer is whole."
)


class TaskLevel(TypedDict):
    users: int
    tasks: int  # tasks started at this level (finished or not)
    tasks_per_s: float | None
    latency_p50_s: float | None  # of finished tasks
    latency_p99_s: float | None
    first_tool_call_p50_s: float | None  # from the task's start to its first tool call, tasks that made one
    finished: float  # share of the tasks that finished
    failed_steps: dict[str, int]  # step -> tasks that failed there


def read_tasks(folders: list[Path]) -> list[dict[str, str]]:
    """The task rows of the run folders, each with its folder's hold windows (none without tasks.csv)."""
    rows: list[dict[str, str]] = []
    for folder in folders:
        if (folder / TASKS_FILE).is_file():
            holds = _holds(folder / LEVELS_FILE)
            with open(folder / TASKS_FILE, newline="", encoding="utf-8") as f:
                rows += [row | holds.get(row["users"], {}) for row in csv.DictReader(f)]
    return rows


def _holds(path: Path) -> dict[str, dict[str, str]]:
    if not path.is_file():
        return {}
    with open(path, newline="", encoding="utf-8") as f:
        return {
            row["users"]: {"hold_start": row["hold_start"], "hold_end": row["hold_end"]} for row in csv.DictReader(f)
        }


def _p(values: list[float], q: float) -> float | None:
    value = percentile(np.array(values, dtype=float), q)
    return None if np.isnan(value) else value


def _rate(rows: list[dict[str, str]]) -> float | None:
    """Tasks per second of one level's rows: ended in its hold over the hold, else over the tasks' span."""
    if rows[0].get("hold_start"):
        start, end = float(rows[0]["hold_start"]), float(rows[0]["hold_end"])
        ended = [row for row in rows if start <= float(row["end_time"]) <= end]
    else:
        start = min(float(row["start_time"]) for row in rows)
        end = max(float(row["end_time"]) for row in rows)
        ended = rows
    return len(ended) / (end - start) if end > start else None


def task_levels(rows: list[dict[str, str]]) -> list[TaskLevel]:
    """Per level (ascending) the tasks' figures; empty without tasks."""
    by_level: dict[int, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_level[int(row["users"])].append(row)
    levels: list[TaskLevel] = []
    for users in sorted(by_level):
        level = by_level[users]
        finished = [float(row["latency_s"]) for row in level if row["finished"] == "1"]
        first_calls = [float(row["tool_call_s"].split(";")[0]) for row in level if row["tool_call_s"]]
        failed = Counter(row["failed_step"] for row in level if row["finished"] != "1")
        levels.append(
            {
                "users": users,
                "tasks": len(level),
                "tasks_per_s": _rate(level),
                "latency_p50_s": _p(finished, 50),
                "latency_p99_s": _p(finished, 99),
                "first_tool_call_p50_s": _p(first_calls, 50),
                "finished": len(finished) / len(level),
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
            percent(level["finished"]),
            ", ".join(f"step {step}: {count}" for step, count in level["failed_steps"].items()),
        ]
        for level in levels
    ]
    headers = ["users", "tasks", "tasks/s", "latency p50 s", "p99 s", "first tool call p50 s", "finished", "failed at"]
    return [Heading(f"Agent tasks: {label}"), Paragraph(TASK_NOTE), Table(headers, rows)]
