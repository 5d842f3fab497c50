"""Recorded sessions (--session-trace) in the analysis: per level the sessions completed per second, their latency,
the turns they ran, TTFT of first and later turns, the sessions the run's stop truncated, and the trace's own block
reuse beside the server's prefix-cache hit rate (docs/guides/sessions-and-traces.md).

A session counts at the level its last turn was sent at. A completed session (every recorded turn answered) and one
a failed turn ended count when that turn ended in the level's window (``levels.ended_in_windows``); a session the
run's stop truncated (its last turn cut, or caught between turns) counts apart, whenever it ended, and so does one a
user joined past its first turn (--session-start), whose latency is not the session's. The per-turn and
per-session tables of every session run are the traces module's."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.metrics import percentile
from vllm_stress.core.numbers import count, percent, seconds

FIELDS = {
    "sessions_completed_per_s": "--session-trace: recorded sessions whose every turn was answered, per second of the "
    "level's window (their last turn ended in it)",
    "session_latency_p50_s": "--session-trace: p50 of a completed session's latency, its first turn's send to its "
    "last answer (the replayed gaps included)",
    "session_latency_p99_s": "--session-trace: p99 of the same",
    "turns_per_session": "--session-trace: mean turns answered per session of the level (completed, ended by a "
    "failed or cancelled turn, truncated)",
    "sessions_truncated": "--session-trace: sessions of the level the run's stop cut short (its last turn aborted, "
    "or the stop came between turns): neither completed nor failed",
    "sessions_failed": "--session-trace: sessions of the level a failed or cancelled turn ended",
    "sessions_joined": "--session-trace with --session-start: sessions of the level a user began past their first "
    "turn (its first session): in no session latency nor sessions/s",
    "ttft_first_turn_p50_s": "--session-trace: TTFT p50 of the measured first turns a session sent: its turn 1 "
    "(nothing of it cached), or the turn a user joined it at (its history primed in the cache, cold with "
    "--no-session-primer)",
    "ttft_later_turns_p50_s": "--session-trace: TTFT p50 of the measured later turns (their history may be cached)",
    "trace_block_reuse": "--session-trace: of the blocks of the turns that ended in the window, the share an earlier "
    "turn of the same recorded session had (the trace's own reuse, what a prefix cache could serve at best within "
    "sessions)",
}
NOTE = (
    "Each recorded session is replayed as one conversation, a user replaying one session after another: a level's "
    "users are its concurrent sessions. Trace reuse is the share of the turns' blocks an earlier turn of the same "
    "recorded session had; the server's hit rate (vllm:prefix_cache_hits / queries in the window) also counts blocks "
    "shared across sessions (a common system prompt) and misses what its cache evicted. Truncated sessions were cut "
    "by the run's stop, joined ones begun past their first turn (--session-start): both counted apart, neither "
    "failures nor in the session latency."
)


def level_fields(level: LevelInput) -> pd.DataFrame:
    index = level.base.index
    fields = pd.DataFrame(index=index, columns=list(FIELDS), dtype=float)
    rows = level.rows[level.rows["session_turns"].notna()]
    if rows.empty:
        return fields
    sessions = session_ends(rows)
    ended = sessions["last"].isin(level.ended.index)
    by_users = level.windows.set_index("users")
    window_s = by_users["end"] - by_users["start"]
    for users in index:
        at = sessions[sessions["users"] == users]
        counted = at[ended[at.index] | at["truncated"] | at["joined"]]
        done = counted[counted["completed"]]
        latency = done["latency_s"].to_numpy(float)
        span = float(window_s.get(users, np.nan))
        fields.loc[users, "sessions_completed_per_s"] = len(done) / span if span > 0 else np.nan
        fields.loc[users, "session_latency_p50_s"] = percentile(latency, 50)
        fields.loc[users, "session_latency_p99_s"] = percentile(latency, 99)
        fields.loc[users, "turns_per_session"] = counted["answered"].mean() if len(counted) else np.nan
        fields.loc[users, "sessions_truncated"] = int(counted["truncated"].sum())
        failed = ~counted["completed"] & ~counted["truncated"] & ~counted["joined"]
        fields.loc[users, "sessions_failed"] = int(failed.sum())
        fields.loc[users, "sessions_joined"] = int(counted["joined"].sum())
    first_ttft, later_ttft = first_and_later_ttft(level, index, sessions["first_turn"])
    fields["ttft_first_turn_p50_s"], fields["ttft_later_turns_p50_s"] = first_ttft, later_ttft
    told = level.ended[level.ended["session_turns"].notna()].groupby("users")
    fields["trace_block_reuse"] = (told["trace_reused_blocks"].sum() / told["trace_blocks"].sum()).reindex(index)
    return fields


def session_ends(rows: pd.DataFrame) -> pd.DataFrame:
    """One row per replayed session (classified rows), by session id: its last row's index and level, its latency,
    the first turn it sent, turns answered, and whether it completed, the run's stop truncated it or a user joined it
    past its first turn (none of the others then)."""
    ordered = rows.sort_values(["session_id", "turn"])
    by_session = ordered.groupby("session_id", sort=False)
    last = by_session.tail(1).set_index("session_id")
    answered = by_session["ok"].sum()
    recorded = last["session_turns"].astype(int)
    first_turn = by_session["turn"].min()
    joined = first_turn > 1
    completed = last["ok"] & (last["turn"] == recorded) & ~joined
    truncated = (last["aborted"] | (last["ok"] & (last["turn"] < recorded))) & ~joined
    return pd.DataFrame(
        {
            "last": by_session.tail(1).index.to_numpy(),
            "users": last["users"],
            "latency_s": by_session["end_time"].max() - by_session["start_time"].min(),
            "first_turn": first_turn,
            "answered": answered,
            "completed": completed,
            "truncated": truncated,
            "joined": joined,
        }
    )


def first_and_later_ttft(level: LevelInput, index: pd.Index, first_turn: pd.Series) -> tuple[pd.Series, pd.Series]:
    """Per level: the TTFT p50 of the measured first turns a session sent (``first_turn`` by session id) and of its
    later ones."""
    measured = level.measured[level.measured["session_turns"].notna()]
    first = measured["turn"] == measured["session_id"].map(first_turn)

    def p50(rows: pd.DataFrame) -> pd.Series:
        by_level = rows.groupby("users")["ttft_s"].apply(lambda ttft: percentile(ttft.to_numpy(float), 50))
        return by_level.reindex(index).astype(float)

    return p50(measured[first]), p50(measured[~first])


def used(config: Config) -> bool:
    """A level with replayed sessions."""
    return any(level.get("turns_per_session") is not None for level in config["levels"])


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    """The per-level table of the recorded sessions."""
    levels = [level for level in config["levels"] if level.get("turns_per_session") is not None]
    headers = ["Users", "Sessions/s", "Latency p50", "Latency p99", "Turns/session", "TTFT turn 1 p50"]
    headers += ["TTFT later p50", "Truncated", "Failed", "Joined", "Trace reuse", "Server prefix hits"]
    rows = [
        [
            str(level["users"]),
            count(level["sessions_completed_per_s"], 3),
            seconds(level["session_latency_p50_s"]),
            seconds(level["session_latency_p99_s"]),
            count(level["turns_per_session"], 2),
            seconds(level["ttft_first_turn_p50_s"]),
            seconds(level["ttft_later_turns_p50_s"]),
            count(level["sessions_truncated"]),
            count(level["sessions_failed"]),
            count(level.get("sessions_joined")),
            percent(level["trace_block_reuse"]),
            percent(level.get("server_prefix_hit_rate")),
        ]
        for level in levels
    ]
    return [Heading(f"Recorded sessions: {label}"), Paragraph(NOTE), Table(headers, rows)]
