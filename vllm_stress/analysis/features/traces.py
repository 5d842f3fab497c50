"""Trace replays, open loops and sessions in the analysis: tables for real traffic beside the per-level ones, per
turn and per session of multi-turn sessions and per time window of an open-loop run or a trace replay
(docs/concepts/analysis.md, "Sessions and open-loop traffic"), and the per-level table's arrival-wait columns.

One module for both registry entries (sessions, traces): a run's tables are one record (summary.json's ``traffic``
list, one entry per run, its turns and its windows side by side), computed from one pass over its rows and shown
together in the report. The per-level figures of replayed recorded sessions (--session-trace) are the sessions
module's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, TypedDict, cast

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import Column, Config, ConfigInput
from vllm_stress.analysis.io.json_types import to_json_types
from vllm_stress.analysis.io.load import Run
from vllm_stress.analysis.measures import classify, prefix_hit_rates, token_times
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.bound import SCHEDULE_LAG_LIMIT_S
from vllm_stress.core.metrics import in_window, percentile, streamed_tokens
from vllm_stress.core.numbers import count, percent, seconds

DEFAULT_WINDOW_S = 10.0
TURNS_NOTE = (
    "Over the whole run, by the turn of the conversation: requests (failures included, streams "
    "cut by the run's stop left out), and of the successful ones on their token targets the mean "
    "prompt tokens, TTFT and the prefix-cache hit rate (cached / prompt tokens from the rows' "
    "usage): what the cache saves as the history grows."
)
BEHIND_NOTE = (
    f"Windows marked behind: the sends waited {SCHEDULE_LAG_LIMIT_S:g} s or more "
    "(p99) after their scheduled time (no free user, or a late process); the client did not keep "
    "the schedule there (more users, or more workers)."
)


class Turn(TypedDict):
    """One turn of the conversations, over the whole run (None: no value)."""

    turn: int
    requests: int
    failures: int
    prompt_tokens_mean: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    prefix_hit_rate: float | None


class Sessions(TypedDict):
    """The sessions of a run and the turns they completed."""

    sessions: int
    turns_completed_mean: float
    turns_completed: dict[int, int] | dict[str, int]  # turns completed -> sessions (keys as text in the summary)
    ended_by_failure: int
    cut_at_stop: int
    duration_p50_s: float
    duration_p99_s: float


class Window(TypedDict):
    """One time window of an open loop, by send time."""

    start_s: float  # since the first send
    requests: int
    failures: int
    output_tokens_per_s: float | None
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    schedule_lag_p50_s: float | None
    schedule_lag_p99_s: float | None
    schedule_lag_max_s: float | None
    behind: bool  # the lag p99 reached SCHEDULE_LAG_LIMIT_S


class TrafficTables(TypedDict):
    """A run's traffic tables (summary.json: a config's ``traffic`` list)."""

    run: str
    turns: list[Turn]
    sessions: Sessions | None
    window_s: float | None
    windows: list[Window]
    schedule_start: dict[str, Any] | None  # run.json's: the start the master sent the workers, their clock skew


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``traffic``: the tables of each run with sessions or an open loop (per ``config.window_s``, by default
    DEFAULT_WINDOW_S), an empty list without such runs."""
    window_s = config.window_s or DEFAULT_WINDOW_S
    return {"traffic": [tables for run in config.runs if (tables := traffic_tables(run.run, window_s))]}


def used(config: Config) -> bool:
    return bool(config.get("traffic")) or open_loop(config)


def open_loop(config: Config) -> bool:
    """Whether a level of the config has a schedule lag: its requests were sent on a schedule."""
    return any(level.get("schedule_lag_p50_s") is not None for level in config["levels"])


def columns(config: Config) -> list[Column]:
    """The open loop's arrival wait (the schedule lag) at p50 and p99."""
    if not open_loop(config):
        return []
    return [
        Column("Arrival wait p50", lambda level: seconds(level["schedule_lag_p50_s"])),
        Column("Arrival wait p99", lambda level: seconds(level["schedule_lag_p99_s"])),
    ]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    return traffic_blocks(config["traffic"])


def traffic_tables(run: Run, window_s: float = DEFAULT_WINDOW_S) -> TrafficTables | None:
    """The run's per-turn, per-session and per-window tables, or None when it has neither sessions nor an open loop."""
    rows = classify(run.requests)
    turns, windows = turn_table(rows), window_table(rows, window_s)
    if not turns and not windows:
        return None
    tables: TrafficTables = {
        "run": str(run.path),
        "turns": turns,
        "sessions": session_summary(rows),
        "window_s": window_s if windows else None,
        "windows": windows,
        "schedule_start": run.meta.get("schedule_start"),
    }
    return cast(TrafficTables, to_json_types(tables))  # its JSON form: NaN as None


def p50_p99(rows: pd.DataFrame, column: str) -> tuple[float, float]:
    """The p50 and p99 of the rows' column."""
    values = rows[column].to_numpy(float)
    return percentile(values, 50), percentile(values, 99)


def turn_table(rows: pd.DataFrame) -> list[Turn]:
    """One entry per turn of the session rows (classified rows, ``vllm_stress.analysis.measures.classify``)."""
    sessions = rows[rows["turn"].notna() & ~rows["aborted"]]
    measured = sessions[sessions["measured"]]
    hit_rates = prefix_hit_rates(measured, "turn")
    table: list[Turn] = []
    for turn, group in sessions.groupby("turn"):
        timed = measured[measured["turn"] == turn]
        ttft_p50, ttft_p99 = p50_p99(timed, "ttft_s")
        table.append(
            {
                "turn": int(cast(float, turn)),
                "requests": len(group),
                "failures": int(group["failed"].sum()),
                "prompt_tokens_mean": float(timed["prompt_tokens"].mean()),
                "ttft_p50_s": ttft_p50,
                "ttft_p99_s": ttft_p99,
                "prefix_hit_rate": float(hit_rates.get(turn, math.nan)),
            }
        )
    return table


def session_summary(rows: pd.DataFrame) -> Sessions | None:
    """Sessions, the turns they completed and their duration (classified rows), or None without sessions."""
    sessions = rows[rows["session_id"].notna()]
    if sessions.empty:
        return None
    by_session = sessions.groupby("session_id")
    completed = by_session["ok"].sum()
    duration = (by_session["end_time"].max() - by_session["start_time"].min()).to_numpy(float)
    last = sessions.sort_values("turn").groupby("session_id").tail(1)
    sessions_by = completed.value_counts().sort_index()  # turns completed -> sessions
    return {
        "sessions": len(completed),
        "turns_completed_mean": float(completed.mean()),
        "turns_completed": dict(
            zip(sessions_by.index.to_numpy(int).tolist(), sessions_by.to_numpy(int).tolist(), strict=True)
        ),
        "ended_by_failure": int(last["failed"].sum()),
        "cut_at_stop": int(last["aborted"].sum()),
        "duration_p50_s": percentile(duration, 50),
        "duration_p99_s": percentile(duration, 99),
    }


def window_table(rows: pd.DataFrame, window_s: float) -> list[Window]:
    """One entry per ``window_s`` of the open-loop rows (classified rows), by send time from the first send."""
    rows = rows[rows["schedule_lag_s"].notna()]
    if rows.empty:
        return []
    first, end, output, _ = token_times(rows)
    start = rows["start_time"].to_numpy(float)
    origin, last = start.min(), end.max()
    table: list[Window] = []
    for index in range(max(1, math.ceil((start.max() - origin) / window_s + 1e-9))):
        a = origin + index * window_s
        b = a + window_s
        sent = rows[in_window(start, a, b)]
        lag = sent["schedule_lag_s"].to_numpy(float)
        span = min(b, last) - a
        ttft_p50, ttft_p99 = p50_p99(sent[sent["measured"]], "ttft_s")
        lag_p50, lag_p99 = p50_p99(sent, "schedule_lag_s")
        table.append(
            {
                "start_s": index * window_s,
                "requests": int((~sent["aborted"]).sum()),
                "failures": int(sent["failed"].sum()),
                "output_tokens_per_s": streamed_tokens(first, end, output, a, b) / span if span > 0 else math.nan,
                "ttft_p50_s": ttft_p50,
                "ttft_p99_s": ttft_p99,
                "schedule_lag_p50_s": lag_p50,
                "schedule_lag_p99_s": lag_p99,
                "schedule_lag_max_s": float(np.nanmax(lag)) if lag.size else math.nan,
                "behind": bool(lag_p99 >= SCHEDULE_LAG_LIMIT_S),
            }
        )
    return table


def traffic_blocks(traffic: list[TrafficTables]) -> list[Block]:
    """The report's per-turn, per-session and per-window blocks of a config's runs (none without such runs)."""
    blocks: list[Block] = []
    for tables in traffic:
        blocks += turn_blocks(tables["run"], tables["turns"])
        if tables["sessions"]:
            blocks.append(sessions_paragraph(tables["sessions"]))
        if tables["windows"] and tables["window_s"]:
            blocks += window_blocks(tables["run"], tables["window_s"], tables["windows"])
        if tables["windows"] and tables["schedule_start"]:
            blocks.append(skew_paragraph(tables["schedule_start"]))
    return blocks


def turn_blocks(run: str, turns: list[Turn]) -> list[Block]:
    """The per-turn table and its note, or nothing without sessions."""
    if not turns:
        return []
    headers = ["Turn", "Requests", "Failures", "Prompt tokens", "TTFT p50", "TTFT p99", "Prefix hits (rows)"]
    rows = [
        [
            str(t["turn"]),
            str(t["requests"]),
            str(t["failures"]),
            count(t["prompt_tokens_mean"]),
            seconds(t["ttft_p50_s"]),
            seconds(t["ttft_p99_s"]),
            percent(t["prefix_hit_rate"]),
        ]
        for t in turns
    ]
    return [Heading(f"Per turn: {run}", 3), Table(headers, rows), Paragraph(TURNS_NOTE)]


def sessions_paragraph(sessions: Sessions) -> Paragraph:
    """How many sessions, the turns they completed, how they ended and how long they took."""
    completed = ", ".join(f"{turns} turns: {n}" for turns, n in sessions["turns_completed"].items())
    return Paragraph(
        f"{sessions['sessions']} sessions, {count(sessions['turns_completed_mean'], 2)} turns completed on average "
        f"({completed}); {sessions['ended_by_failure']} ended by a failed turn, {sessions['cut_at_stop']} by a turn "
        "the run's stop cut (the ones it caught between turns count with the turns they completed); duration p50 "
        f"{seconds(sessions['duration_p50_s'])}, p99 {seconds(sessions['duration_p99_s'])} (first send to last "
        "answer, think times included)."
    )


def window_blocks(run: str, window_s: float, windows: list[Window]) -> list[Block]:
    """The per-window table of an open loop, and the note on windows behind their schedule."""
    headers = [
        "From (s)",
        "Requests",
        "Failures",
        "Output tok/s",
        "TTFT p50",
        "TTFT p99",
        "Lag p50",
        "Lag p99",
        "Lag max",
    ]
    rows = [
        [
            f"{w['start_s']:g}" + (" (behind)" if w["behind"] else ""),
            str(w["requests"]),
            str(w["failures"]),
            count(w["output_tokens_per_s"]),
            seconds(w["ttft_p50_s"]),
            seconds(w["ttft_p99_s"]),
            seconds(w["schedule_lag_p50_s"]),
            seconds(w["schedule_lag_p99_s"]),
            seconds(w["schedule_lag_max_s"]),
        ]
        for w in windows
    ]
    blocks: list[Block] = [Heading(f"Per {window_s:g} s window: {run}", 3), Table(headers, rows)]
    return blocks + ([Paragraph(BEHIND_NOTE)] if any(w["behind"] for w in windows) else [])


def skew_paragraph(start: dict[str, Any]) -> Paragraph:
    """The workers' one schedule start and how far apart their clocks were (run.json's schedule_start)."""
    workers = start["workers"].values()
    late = sum(worker["ahead_ms"] < 0 for worker in workers)
    return Paragraph(
        f"The {len(workers)} workers counted the schedule from one start sent by the master; their clocks were "
        f"{start['skew_ms']:.1f} ms apart (each worker's offset from the master's, estimated within "
        f"{max(worker['round_trip_ms'] for worker in workers) / 2:.1f} ms from a message round trip)"
        + (f"; {late} had the start only after it: their first sends were late." if late else ".")
    )
