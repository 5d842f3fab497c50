"""The live saturation verdict of a held level — server-bound or client-bound, and by what — for the dashboard's
throughput-vs-users curve, by the report's own rule (``vllm_stress.analysis.stats.level_bound``) on the report's own inputs.

``level_bound`` reads a level's server load (``vllm_stress.analysis.levels.server_load``: Little's law on the server's histograms
in ``server_metrics.csv``), its load generators' CPU and event-loop lag (``vllm_stress.analysis.levels.client_health_max`` on
``client_health.csv``) and, in an open loop, its schedule lag p99, each over the level's hold in ``levels.csv``. The
master writes these files as the run goes (``vllm_stress/master/telemetry.py``, ``vllm_stress/master/runfolder.py``), so a level's
verdict is read from them once its hold is in ``levels.csv`` and the samples that overlap it have arrived
(``SETTLE_S`` later); the schedule lag comes from the rows the master kept of the hold
(``LevelWindow.schedule_lag_p99_s``, with ``hooks.level_ended``).

Where it can differ from the report's: a load generator's CPU sample that overlaps the hold but reaches the master
more than ``SETTLE_S`` after it (a worker silent for a while) is missing here; the schedule lag counts the hold's
requests the master had when the hold ended (the report also those whose rows came later); and an interrupted
run's last level, never held, gets no point on the live curve while the report derives a window for it.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pandas as pd

from vllm_stress.analysis.levels import client_health_max, server_load
from vllm_stress.analysis.load import AnalysisError, read_tables
from vllm_stress.analysis.stats import level_bound

log = logging.getLogger(__name__)

SETTLE_S = 8.0  # a worker's CPU sample comes with its next report (3 s), the master's own every 5 s


def hold_bound(folder: Path, level: dict, now: float | None = None) -> str | None:
    """The bound of the held ``level`` (a ``RampProgress.level_results`` entry) from the run ``folder``'s files: the
    report's label ("" when nothing says), "unknown (...)" when a file cannot be read, or None until its hold is in
    ``levels.csv`` and SETTLE_S old."""
    try:
        holds = read_tables(folder, ("levels",)).get("levels")
        hold = None if holds is None else holds[holds["users"] == level["users"]].tail(1)
        if hold is None or hold.empty or (now or time.time()) < float(hold["hold_end"].iloc[0]) + SETTLE_S:
            return None
        tables = read_tables(folder, ("server", "client_health"))
    except AnalysisError as error:
        log.warning("The live bound of %d users: %s", level["users"], error)
        return f"unknown ({error})"
    windows = pd.DataFrame(
        {"users": [level["users"]], "start": hold["hold_start"].to_numpy(), "end": hold["hold_end"].to_numpy()}
    )
    inputs = server_load(tables.get("server"), windows).iloc[0].copy()
    inputs["users"] = level["users"]
    health = tables.get("client_health")
    inputs["client_cpu_max_percent"] = client_health_max(health, windows, "cpu_percent")[0]
    inputs["client_loop_lag_max_ms"] = client_health_max(health, windows, "loop_lag_ms")[0]
    inputs["schedule_lag_p99_s"] = level.get("schedule_lag_p99_s", float("nan"))
    return level_bound(inputs)
