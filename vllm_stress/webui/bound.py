"""The live bound of a held level for the dashboard's throughput-vs-users curve: the report's rule
(``vllm_stress.core.bound``) on the files the master writes as the run goes, read once the hold is in
``levels.csv`` and its samples have arrived (``SETTLE_S``). docs/concepts/bounds.md says where it can still
differ from the report's."""

from __future__ import annotations

import csv
import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from vllm_stress.core import bound
from vllm_stress.core.csvrows import numeric_rows
from vllm_stress.core.schema import CLIENT_HEALTH_FILE, LEVELS_FILE, RUN_FILE, SERVER_METRICS_FILE

log = logging.getLogger(__name__)

SETTLE_S = 8.0  # a worker's CPU sample comes with its next report (3 s), the master's own every 5 s


def hold_bound(folder: Path, level: dict[str, Any], now: float | None = None) -> str | None:
    """The bound of the held ``level`` (hold_level's "bound"), or None until it can be read."""
    held = hold_level(folder, level, now)
    return None if held is None else str(held["bound"])


def hold_level(folder: Path, level: dict[str, Any], now: float | None = None) -> dict[str, Any] | None:
    """What the server ran during the hold of ``level`` (a ``RampProgress.level_results`` entry: its users, schedule
    lag and e2e p50) and its bound: the report's label ("" when nothing says), "unknown (...)" when a file cannot be
    read; with the level fields the bound and the saturation cause read (SERVER_LOAD_FIELDS,
    server_kv_cache_usage_mean, max_num_seqs from run.json's launch command, NaN or None when unknown). None until its
    hold is in ``levels.csv`` and SETTLE_S old. It has no preemption count nor client in-flight mean, which the report
    has: a level the report calls memory-bound by preemptions alone, or client/gateway-bound by a short in-flight
    count, reads otherwise here."""
    try:
        holds = [row for row in numeric_rows(folder / LEVELS_FILE) if row["users"] == level["users"]]
        if not holds or (now or time.time()) < holds[-1]["hold_end"] + SETTLE_S:
            return None
        start, end = holds[-1]["hold_start"], holds[-1]["hold_end"]
        scrapes = numeric_rows(folder / SERVER_METRICS_FILE)
        inputs = bound.server_load(scrapes, start, end)
        health = numeric_rows(folder / CLIENT_HEALTH_FILE)
        run = json.loads((folder / RUN_FILE).read_text()) if (folder / RUN_FILE).is_file() else {}
    except (OSError, KeyError, TypeError, ValueError, csv.Error) as error:
        log.warning("The live bound of %d users: %s", level["users"], error)
        return {"bound": f"unknown ({type(error).__name__}: {error})"}
    figures = {
        **inputs,
        "server_kv_cache_usage_mean": bound.gauge_mean(scrapes, "kv_cache_usage", start, end),
        "max_num_seqs": bound.launch_max_num_seqs(run),
    }
    verdict = bound.level_bound(
        {
            **figures,
            "max_num_seqs": figures["max_num_seqs"] or math.nan,
            "users": level["users"],
            "client_cpu_max_percent": bound.health_max(health, "cpu_percent", start, end),
            "client_loop_lag_max_ms": bound.health_max(health, "loop_lag_ms", start, end),
            "client_read_behind_p99_ms": bound.health_max(health, "read_behind_p99_ms", start, end),
            "e2e_p50_s": level.get("e2e_p50_s", math.nan),
            "schedule_lag_p99_s": level.get("schedule_lag_p99_s", math.nan),
        }
    )
    return {**figures, "bound": verdict}
