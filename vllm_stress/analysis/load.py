"""Read and validate run folders: the files named in ``vllm_stress.core.schema`` plus Locust's own CSVs. Every
problem with the input is an :class:`AnalysisError` of one line naming the file; the CLI prints it without a
traceback."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from vllm_stress.core.schema import (
    CLIENT_HEALTH_FILE,
    ITL_COLUMNS,
    ITL_FILE,
    LEVEL_COLUMNS,
    LEVELS_FILE,
    LOCUST_CSV_PREFIX,
    OPTIONAL_REQUEST_COLUMNS,
    REQUEST_COLUMNS,
    REQUESTS_FILE,
    RUN_FILE,
    SERVER_METRICS_FILE,
)

# The request columns the analysis reads (a subset of REQUEST_COLUMNS; all of REQUEST_COLUMNS but
# OPTIONAL_REQUEST_COLUMNS must be present; those are read too when there).
READ_REQUEST_COLUMNS = [
    "start_time",
    "end_time",
    "ttft_s",
    "tpot_s",
    "e2e_s",
    "prompt_tokens",
    "completion_tokens",
    "target_prompt_tokens",
    "chunks",
    "ok",
    "error",
    "users",
    "count_mismatch",
    "finish_reason",
    "schedule_lag_s",
    "cached_tokens",
]
TEXT_REQUEST_COLUMNS = ["error", "finish_reason"]
NUMERIC_REQUEST_COLUMNS = [c for c in READ_REQUEST_COLUMNS if c not in TEXT_REQUEST_COLUMNS]
SERVER_READ_COLUMNS = ["time", "e2e_count", "e2e_sum_s", "queue_sum_s"]  # of SERVER_METRICS_COLUMNS
SERVER_OPTIONAL_COLUMNS = [
    "http_count",
    "http_sum_s",
    "frontend_cpu_s",
    "prefix_cache_queries",
    "prefix_cache_hits",
]  # newer columns: NaN in older runs

# name -> (file in the run folder, columns it must have). Locust columns: docs/locust.md §6. A new per-run source
# plugs in with an entry here and a per-level function in levels.py.
OPTIONAL_TABLES = {
    "levels": (LEVELS_FILE, LEVEL_COLUMNS),
    "itl": (ITL_FILE, ITL_COLUMNS),
    "locust_failures": (f"{LOCUST_CSV_PREFIX}_failures.csv", ["Method", "Name", "Error", "Occurrences"]),
    "locust_exceptions": (f"{LOCUST_CSV_PREFIX}_exceptions.csv", ["Count", "Message", "Nodes"]),
    "server": (SERVER_METRICS_FILE, SERVER_READ_COLUMNS),
    "client_health": (CLIENT_HEALTH_FILE, ["time", "worker", "cpu_percent"]),
}
NUMERIC_TABLE_COLUMNS = {
    "levels": LEVEL_COLUMNS,
    "itl": ITL_COLUMNS,
    "server": SERVER_READ_COLUMNS,
    "client_health": ["time", "cpu_percent"],
}
CLIENT_HEALTH_OPTIONAL_COLUMNS = ["loop_lag_ms"]


RunMeta = dict[str, Any]  # run.json as read: vllm_stress.core.schema.RUN_KEYS to JSON values


class AnalysisError(Exception):
    """Bad input: the message is one line naming the file and the problem."""


@dataclass
class Run:
    """One run folder: its request rows, optional tables and run.json."""

    path: Path
    requests: pd.DataFrame
    tables: dict[str, pd.DataFrame] = field(default_factory=dict)
    meta: RunMeta = field(default_factory=dict)

    @property
    def interrupted(self) -> bool:
        """run.json says the run did not finish (Ctrl-C, SIGTERM, lost master)."""
        return self.meta.get("complete") is False


def load_run(path: str | Path) -> Run:
    """Read one run folder, or raise AnalysisError."""
    folder = Path(path)
    if not folder.is_dir():
        raise AnalysisError(f"{folder}: not a folder")
    requests = read_requests(folder / REQUESTS_FILE)
    tables = read_tables(folder)
    if "levels" in tables:
        check_levels(folder / LEVELS_FILE, tables)
    return Run(folder, requests, tables, read_meta(folder / RUN_FILE))


def read_tables(folder: Path, names: Iterable[str] = OPTIONAL_TABLES) -> dict[str, pd.DataFrame]:
    """The optional tables ``names`` (of OPTIONAL_TABLES) that the run folder has, their newer columns NaN when an
    older run lacks them; AnalysisError for an unreadable one. (The live dashboard reads the server's and the
    clients' tables of a running run this way too.)"""
    tables = {}
    for name in names:
        file_name, columns = OPTIONAL_TABLES[name]
        if (folder / file_name).is_file():
            tables[name] = read_table(folder / file_name, columns, NUMERIC_TABLE_COLUMNS.get(name, []))
    for name, optional in (("server", SERVER_OPTIONAL_COLUMNS), ("client_health", CLIENT_HEALTH_OPTIONAL_COLUMNS)):
        if name in tables:
            table = tables[name]
            for column in optional:
                table[column] = pd.to_numeric(table[column], errors="coerce") if column in table else float("nan")
    return tables


def read_requests(path: Path) -> pd.DataFrame:
    """requests.csv with the columns the analysis uses; users as int, ok as bool."""
    if not path.is_file():
        raise AnalysisError(f"{path}: file missing")
    check_header(path, [column for column in REQUEST_COLUMNS if column not in OPTIONAL_REQUEST_COLUMNS])
    try:
        rows = pd.read_csv(
            path,
            usecols=lambda column: column in READ_REQUEST_COLUMNS + OPTIONAL_REQUEST_COLUMNS,
            dtype=dict.fromkeys([*TEXT_REQUEST_COLUMNS, "session_id"], "string"),
        )
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not a readable CSV ({unreadable(exc)})") from None
    if not rows.empty and pd.isna(rows["users"].iloc[-1]):
        rows = rows.iloc[:-1]  # the half-written last line of a killed run
    if rows.empty:
        raise AnalysisError(f"{path}: empty run (no request rows)")
    require_numeric(path, rows, NUMERIC_REQUEST_COLUMNS)
    for column in ("start_time", "end_time", "e2e_s", "ok", "users"):
        if rows[column].isna().any():
            raise AnalysisError(f"{path}: column {column} has empty values (line {line_of(rows[column].isna())})")
    backwards = rows["end_time"] < rows["start_time"]
    if backwards.any():
        raise AnalysisError(f"{path}: a request ends before it starts (line {line_of(backwards)})")
    for column in OPTIONAL_REQUEST_COLUMNS:  # a run folder from before they existed
        if column not in rows:
            rows[column] = (
                pd.Series(pd.NA, index=rows.index, dtype="string") if column == "session_id" else float("nan")
            )
    rows["users"] = rows["users"].astype("int64")
    rows["ok"] = rows["ok"].astype(bool)
    rows["count_mismatch"] = rows["count_mismatch"].fillna(0).astype(bool)
    return rows


def read_table(path: Path, columns: list[str], numeric: list[str]) -> pd.DataFrame:
    """An optional CSV with its required columns checked; numeric ones must parse as numbers."""
    check_header(path, columns)
    try:
        table = pd.read_csv(path)
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not a readable CSV ({unreadable(exc)})") from None
    require_numeric(path, table, numeric)
    return table


def check_header(path: Path, columns: list[str]) -> None:
    """Raise when the CSV's header lacks one of ``columns``."""
    try:
        header = pd.read_csv(path, nrows=0).columns
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise AnalysisError(f"{path}: missing column(s) {', '.join(missing)}")


def unreadable(exc: Exception) -> str:
    """What a CSV parser error says, in one line."""
    if isinstance(exc, UnicodeDecodeError):
        return f"not UTF-8 text at byte {exc.start}"
    return str(exc).strip().splitlines()[-1]


def require_numeric(path: Path, table: pd.DataFrame, columns: list[str]) -> None:
    """Raise when one of ``columns`` holds something that is not a number."""
    for column in columns:
        if not table.empty and not pd.api.types.is_numeric_dtype(table[column]):
            bad = pd.to_numeric(table[column], errors="coerce").isna() & table[column].notna()
            value = table[column].iloc[int(bad.to_numpy().argmax())]
            raise AnalysisError(f"{path}: column {column} is not numeric (line {line_of(bad)}: {value!r})")


def line_of(mask: pd.Series) -> int:
    """The file line of the first True row of ``mask`` (1-based, after the header)."""
    return int(mask.to_numpy().argmax()) + 2


def read_meta(path: Path) -> RunMeta:
    """run.json, or {} when the run has none."""
    if not path.is_file():
        return {}
    try:
        meta = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not valid JSON ({exc})") from None
    if not isinstance(meta, dict):
        raise AnalysisError(f"{path}: expected a JSON object")
    return meta


def check_levels(path: Path, tables: dict[str, pd.DataFrame]) -> None:
    """Set apart the levels closed before their hold started (hold_end <= hold_start: the run stopped during their
    ramp or warm-up) as ``not_held``; what is left must name each level once. A levels.csv without a held level
    (a plain Locust run has a header-only one) counts as absent."""
    levels = tables["levels"]
    not_held = levels["hold_end"] <= levels["hold_start"]
    tables["not_held"] = levels[not_held].reset_index(drop=True)
    levels = tables["levels"] = levels[~not_held].reset_index(drop=True)
    if levels.empty:
        del tables["levels"]
    elif levels["users"].duplicated().any():
        raise AnalysisError(f"{path}: users={levels['users'][levels['users'].duplicated()].iloc[0]} appears twice")
