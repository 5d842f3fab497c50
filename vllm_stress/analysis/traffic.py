"""Tables for real traffic, beside the per-level ones: per turn and per session of multi-turn sessions (rows with
``session_id`` and ``turn``, locustfiles/session.py), and per time window of an open-loop run or a trace replay
(rows with ``schedule_lag_s``), where the ``users`` column is only the pool that carried the arrivals, not the load.

* **Per turn**: requests (aborted ones left out), failures, mean prompt tokens, TTFT p50/p99 and the prefix-cache
  hit rate from the rows (token-weighted, ``vllm_stress.analysis.levels.prefix_hit_rates``) of the measured requests of each
  turn, over the whole run: what prefix caching buys as the history grows.
* **Per session**: how many sessions, the turns each completed (answered), the sessions a failure ended and the ones
  the run's stop cut, and the session duration (first send to last answer, think times included) p50/p99.
* **Per window** (``window_s`` seconds from the first send, by send time): requests, failures, output tok/s
  (``vllm_stress.core.metrics.streamed_tokens``), TTFT p50/p99, and the schedule lag p50/p99/max; a window whose lag p99
  reaches ``vllm_stress.analysis.bound.SCHEDULE_LAG_LIMIT_S`` is flagged ``behind``: the client did not keep the schedule there.

Every percentile is ``vllm_stress.core.metrics.percentile``. One entry per run that has such rows: ``{"run", "turns",
"sessions", "windows"}`` in the config's ``traffic`` list of summary.json.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from vllm_stress.analysis.levels import classify, prefix_hit_rates, token_times
from vllm_stress.analysis.load import Run
from vllm_stress.analysis.render import Block, Heading, Paragraph, Table
from vllm_stress.analysis.summary import to_json_types
from vllm_stress.core.bound import SCHEDULE_LAG_LIMIT_S
from vllm_stress.core.metrics import percentile, streamed_tokens
from vllm_stress.core.numbers import count, percent, seconds

DEFAULT_WINDOW_S = 10.0


def traffic_tables(run: Run, window_s: float = DEFAULT_WINDOW_S) -> dict | None:
    """The run's per-turn, per-session and per-window tables, or None when it has neither sessions nor an open loop."""
    rows = classify(run.requests)
    turns, windows = turn_table(rows), window_table(rows, window_s)
    if not turns and not windows:
        return None
    return to_json_types(
        {
            "run": str(run.path),
            "turns": turns,
            "sessions": session_summary(rows),
            "window_s": window_s if windows else None,
            "windows": windows,
        }
    )


def latency(rows: pd.DataFrame, column: str) -> dict:
    """``{column}_p50_s`` and ``_p99_s`` of the rows' column (seconds)."""
    values = rows[column].to_numpy(float)
    name = column.removesuffix("_s")
    return {f"{name}_p50_s": percentile(values, 50), f"{name}_p99_s": percentile(values, 99)}


def turn_table(rows: pd.DataFrame) -> list[dict]:
    """One entry per turn of the session rows (classified rows, ``vllm_stress.analysis.levels.classify``)."""
    sessions = rows[rows["turn"].notna() & ~rows["aborted"]]
    measured = sessions[sessions["measured"]]
    hit_rates = prefix_hit_rates(measured, "turn")
    table = []
    for turn, group in sessions.groupby("turn"):
        timed = measured[measured["turn"] == turn]
        table.append(
            {
                "turn": int(turn),
                "requests": len(group),
                "failures": int(group["failed"].sum()),
                "prompt_tokens_mean": timed["prompt_tokens"].mean(),
                **latency(timed, "ttft_s"),
                "prefix_hit_rate": hit_rates.get(turn, math.nan),
            }
        )
    return table


def session_summary(rows: pd.DataFrame) -> dict | None:
    """Sessions, the turns they completed and their duration (classified rows), or None without sessions."""
    sessions = rows[rows["session_id"].notna()]
    if sessions.empty:
        return None
    by_session = sessions.groupby("session_id")
    completed = by_session["ok"].sum()
    duration = (by_session["end_time"].max() - by_session["start_time"].min()).to_numpy(float)
    last = sessions.sort_values("turn").groupby("session_id").tail(1)
    return {
        "sessions": len(completed),
        "turns_completed_mean": completed.mean(),
        "turns_completed": {int(turns): int(count) for turns, count in completed.value_counts().sort_index().items()},
        "ended_by_failure": int(last["failed"].sum()),
        "cut_at_stop": int(last["aborted"].sum()),
        "duration_p50_s": percentile(duration, 50),
        "duration_p99_s": percentile(duration, 99),
    }


def window_table(rows: pd.DataFrame, window_s: float) -> list[dict]:
    """One entry per ``window_s`` of the open-loop rows (classified rows), by send time from the first send."""
    rows = rows[rows["schedule_lag_s"].notna()]
    if rows.empty:
        return []
    first, end, output, _ = token_times(rows)
    start = rows["start_time"].to_numpy(float)
    origin, last = start.min(), end.max()
    table = []
    for index in range(max(1, math.ceil((start.max() - origin) / window_s + 1e-9))):
        a = origin + index * window_s
        b = a + window_s
        sent = rows[(start >= a) & (start < b)]
        lag = sent["schedule_lag_s"].to_numpy(float)
        span = min(b, last) - a
        entry = {
            "start_s": index * window_s,
            "requests": int((~sent["aborted"]).sum()),
            "failures": int(sent["failed"].sum()),
            "output_tokens_per_s": streamed_tokens(first, end, output, a, b) / span if span > 0 else math.nan,
            **latency(sent[sent["measured"]], "ttft_s"),
            **latency(sent, "schedule_lag_s"),
            "schedule_lag_max_s": float(np.nanmax(lag)) if lag.size else math.nan,
        }
        entry["behind"] = bool(entry["schedule_lag_p99_s"] >= SCHEDULE_LAG_LIMIT_S)
        table.append(entry)
    return table


def traffic_blocks(config: dict) -> list[Block]:
    """The report's per-turn, per-session and per-window blocks of a config (none without such runs)."""
    blocks: list[Block] = []
    for traffic in config.get("traffic") or []:
        run = traffic["run"]
        if traffic["turns"]:
            blocks += [
                Heading(f"Per turn: {run}", 3),
                Table(
                    ["Turn", "Requests", "Failures", "Prompt tokens", "TTFT p50", "TTFT p99", "Prefix hits (rows)"],
                    [
                        [
                            str(t["turn"]),
                            str(t["requests"]),
                            str(t["failures"]),
                            count(t["prompt_tokens_mean"]),
                            seconds(t["ttft_p50_s"]),
                            seconds(t["ttft_p99_s"]),
                            percent(t["prefix_hit_rate"]),
                        ]
                        for t in traffic["turns"]
                    ],
                ),
                Paragraph(
                    "Over the whole run, by the turn of the conversation: requests (failures included, streams "
                    "cut by the run's stop left out), and of the successful ones on their token targets the mean "
                    "prompt tokens, TTFT and the prefix-cache hit rate (cached / prompt tokens from the rows' "
                    "usage): what the cache saves as the history grows."
                ),
            ]
        if sessions := traffic["sessions"]:
            completed = ", ".join(f"{turns} turns: {count}" for turns, count in sessions["turns_completed"].items())
            blocks.append(
                Paragraph(
                    f"{sessions['sessions']} sessions, {count(sessions['turns_completed_mean'], 2)} turns completed on average "
                    f"({completed}); {sessions['ended_by_failure']} ended by a failed turn, {sessions['cut_at_stop']} by a turn "
                    f"the run's stop cut (the ones it caught between turns count with the turns they completed); duration p50 {seconds(sessions['duration_p50_s'])}, p99 "
                    f"{seconds(sessions['duration_p99_s'])} (first send to last answer, think times included)."
                )
            )
        if traffic["windows"]:
            blocks += [
                Heading(f"Per {traffic['window_s']:g} s window: {run}", 3),
                Table(
                    [
                        "From (s)",
                        "Requests",
                        "Failures",
                        "Output tok/s",
                        "TTFT p50",
                        "TTFT p99",
                        "Lag p50",
                        "Lag p99",
                        "Lag max",
                    ],
                    [
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
                        for w in traffic["windows"]
                    ],
                ),
            ]
            if any(w["behind"] for w in traffic["windows"]):
                blocks.append(
                    Paragraph(
                        f"Windows marked behind: the sends waited {SCHEDULE_LAG_LIMIT_S:g} s or more "
                        "(p99) after their scheduled time for a free user; the client did not keep "
                        "the schedule there (more users, or more workers)."
                    )
                )
    return blocks
