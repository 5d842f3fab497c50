"""Synthetic run folders with exact, known answers: for the tests, the benchmarks and trying the report offline
(docs/concepts/analysis.md, "Synthetic runs with known answers", derives the closed loop's answers)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from vllm_stress.analysis.io.load import RunMeta
from vllm_stress.core import metrics
from vllm_stress.core.schema import (
    ITL_COLUMNS,
    ITL_FILE,
    LEVEL_COLUMNS,
    LEVELS_FILE,
    REQUEST_COLUMNS,
    REQUESTS_FILE,
    RUN_FILE,
)

LevelRow = tuple[int, float, float, float]  # a levels.csv row: users, ramp_start, hold_start, hold_end


def request_rows(
    users: ArrayLike,
    end_time: ArrayLike,
    e2e_s: ArrayLike,
    *,
    prompt_tokens: ArrayLike = 2048,
    completion_tokens: ArrayLike = 512,
    ok: ArrayLike = 1,
    ttft_fraction: float = 0.1,
    worker: str = "local",
) -> pd.DataFrame:
    """Rows ending at ``end_time`` after ``e2e_s``; TTFT is ``ttft_fraction`` of e2e, TPOT follows from it.

    Scalars broadcast. Failed rows (ok=0) get error "HTTP 503", status 503 and no token counts.
    """
    end = np.asarray(end_time, dtype=float)
    e2e = np.broadcast_to(np.asarray(e2e_s, dtype=float), end.shape)
    ok_flags = np.broadcast_to(np.asarray(ok, dtype=int), end.shape).astype(bool)
    output = np.broadcast_to(np.asarray(completion_tokens, dtype=float), end.shape)
    ttft = e2e * ttft_fraction
    rows = pd.DataFrame(
        {
            "start_time": end - e2e,
            "end_time": end,
            "ttft_s": np.where(ok_flags, ttft, np.nan),
            "tpot_s": np.where(ok_flags, tpots(e2e, ttft, output), np.nan),
            "e2e_s": e2e,
            "chunks": np.where(ok_flags, output, 0),
            "prompt_tokens": np.where(ok_flags, prompt_tokens, np.nan),
            "completion_tokens": np.where(ok_flags, output, np.nan),
            "target_prompt_tokens": prompt_tokens,
            "target_completion_tokens": output,
            "count_mismatch": 0,
            "ok": ok_flags.astype(int),
            "error": np.where(ok_flags, "", "HTTP 503"),
            "status": np.where(ok_flags, 200, 503),
            "finish_reason": np.where(ok_flags, "length", ""),
            "users": np.broadcast_to(np.asarray(users, dtype=int), end.shape),
            "worker": worker,
            "name": "chat",
            "schedule_lag_s": np.nan,
            "cached_tokens": np.nan,
            "request_id": "",
            "session_id": "",
            "turn": np.nan,
            "ttfa_s": np.where(ok_flags, ttft, np.nan),
            "reasoning_tokens": np.nan,
            "replica": "",
            "images": 0,
            "image_tokens": 0,
            "image_bytes": 0,
            "videos": 0,
            "video_tokens": 0,
            "video_bytes": 0,
            "canary": "",
            "adapter": "",
            "class": "",
            "schema_id": "",
            "schema_first_use": np.nan,
            "answer_valid": "",
            "task_id": "",
            "step": np.nan,
            "shared_prefix_tokens": np.nan,
            "endpoint": "",
            "cancel_after": "",
            "inputs": np.nan,
            "trace_blocks": np.nan,
            "trace_reused_blocks": np.nan,
            "session_turns": np.nan,
            "connect_s": np.nan,
            "burst": np.nan,
            "audio_s": np.nan,
        }
    )
    return rows[REQUEST_COLUMNS]


def tpots(e2e: np.ndarray, ttft: np.ndarray, output: np.ndarray) -> np.ndarray:
    """vllm_stress.core.metrics.tpot of each request, NaN where undefined."""
    values = (metrics.tpot(*request) for request in zip(e2e, ttft, output, strict=True))
    return np.array([np.nan if value is None else value for value in values], dtype=float)


def closed_loop_rows(
    users: int,
    start: float,
    end: float,
    e2e_s: ArrayLike,
    *,
    loops: int | None = None,
    spread: float = 1.0,
    prompt_tokens: ArrayLike = 2048,
    completion_tokens: ArrayLike = 512,
    ok: ArrayLike = 1,
    ttft_fraction: float = 0.1,
    worker: str = "local",
) -> pd.DataFrame:
    """The rows of one closed-loop level (docs/concepts/analysis.md), sorted by end time.

    ``e2e_s``, ``prompt_tokens``, ``completion_tokens`` and ``ok`` are a scalar (every request alike), one cycle
    (shape ``(n,)``, every loop repeats it) or one cycle per loop (shape ``(loops, n)``). ``loops`` below ``users``
    models a level whose users never all had a request in flight (an underloaded level).
    """
    loops = users if loops is None else loops
    cycle = np.atleast_2d(np.asarray(e2e_s, dtype=float))
    cycle = np.broadcast_to(cycle, (loops, cycle.shape[1]))
    period = cycle.sum(axis=1)
    first_start = start + (np.arange(loops) + 1 / 3) / loops * spread * period
    repeats = max(1, int(np.ceil(((end - first_start) / period).max())) + 1)
    durations = np.tile(cycle, (1, repeats))
    starts = first_start[:, None] + np.cumsum(durations, axis=1) - durations
    sent = starts < end

    def per_request(value: ArrayLike) -> np.ndarray:
        values = np.broadcast_to(np.atleast_2d(np.asarray(value)), cycle.shape)
        sent_values: np.ndarray = np.tile(values, (1, repeats))[sent]
        return sent_values

    rows = request_rows(
        users,
        starts[sent] + durations[sent],
        durations[sent],
        prompt_tokens=per_request(prompt_tokens),
        completion_tokens=per_request(completion_tokens),
        ok=per_request(ok),
        ttft_fraction=ttft_fraction,
        worker=worker,
    )
    return rows.sort_values("end_time", kind="stable").reset_index(drop=True)


def write_run(
    folder: Path,
    rows: pd.DataFrame,
    levels: list[LevelRow] | None = None,
    itl: list[tuple[int, float, int]] | None = None,
    meta: RunMeta | None = None,
) -> Path:
    """A run folder: requests.csv, and levels.csv / itl_histogram.csv / run.json when given."""
    folder.mkdir(parents=True, exist_ok=True)
    rows.to_csv(folder / REQUESTS_FILE, index=False, float_format="%.6f")
    if levels is not None:
        pd.DataFrame(levels, columns=LEVEL_COLUMNS).to_csv(folder / LEVELS_FILE, index=False)
    if itl is not None:
        pd.DataFrame(itl, columns=ITL_COLUMNS).to_csv(folder / ITL_FILE, index=False)
    if meta is not None:
        (folder / RUN_FILE).write_text(json.dumps(meta))
    return folder


def step_levels(users: list[int], hold_s: float, ramp_s: float = 10.0, t0: float = 1.7e9) -> list[LevelRow]:
    """levels.csv rows of a step ramp: each level ramps for ``ramp_s`` then holds for ``hold_s``."""
    rows: list[LevelRow] = []
    for index, level in enumerate(users):
        ramp_start = t0 + index * (ramp_s + hold_s)
        rows.append((level, ramp_start, ramp_start + ramp_s, ramp_start + ramp_s + hold_s))
    return rows
