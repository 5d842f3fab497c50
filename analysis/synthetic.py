"""Synthetic run folders with exact, known answers: for the tests, the benchmark and trying the report offline.

``request_rows`` builds rows with every column of ``REQUEST_COLUMNS`` from arrays (vectorised); ``write_run``
writes them with the optional files into a run folder in the format the suite writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from locustfiles.records import (
    ITL_COLUMNS,
    ITL_FILE,
    LEVEL_COLUMNS,
    LEVELS_FILE,
    REQUEST_COLUMNS,
    REQUESTS_FILE,
    RUN_FILE,
)


def request_rows(
    users,
    end_time,
    e2e_s,
    *,
    prompt_tokens=2048,
    completion_tokens=512,
    ok=1,
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
            "tpot_s": np.where(ok_flags & (output > 1), (e2e - ttft) / np.maximum(output - 1, 1), np.nan),
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
        }
    )
    return rows[REQUEST_COLUMNS]


def write_run(
    folder: Path,
    rows: pd.DataFrame,
    levels: list[tuple[int, float, float, float]] | None = None,
    itl: list[tuple[int, float, int]] | None = None,
    meta: dict | None = None,
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


def step_levels(users: list[int], hold_s: float, ramp_s: float = 10.0, t0: float = 1.7e9) -> list[tuple]:
    """levels.csv rows of a step ramp: each level ramps for ``ramp_s`` then holds for ``hold_s``."""
    rows = []
    for index, level in enumerate(users):
        ramp_start = t0 + index * (ramp_s + hold_s)
        rows.append((level, ramp_start, ramp_start + ramp_s, ramp_start + ramp_s + hold_s))
    return rows
