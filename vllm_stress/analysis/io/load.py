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

from vllm_stress.analysis.io.serverview import SERVER_VIEW_COLUMNS, with_server_view
from vllm_stress.core import fleet
from vllm_stress.core.formats import FORMAT_VERSION, FORMATS, FormatError, added_after, format_of
from vllm_stress.core.schema import (
    CLIENT_HEALTH_FILE,
    CONNECTOR_COUNTERS,
    ENGINE_STEP_COUNTERS,
    EXTERNAL_PREFIX_COUNTERS,
    FORMAT_KEY,
    GPU_METRICS_FILE,
    ITL_COLUMNS,
    ITL_FILE,
    KV_RESIDENCY_COLUMNS,
    LEVEL_COLUMNS,
    LEVELS_FILE,
    LOCUST_CSV_PREFIX,
    REPLICA_COLUMNS,
    REPLICAS_FILE,
    REQUEST_COLUMNS,
    REQUEST_TEXT_COLUMNS,
    REQUESTS_FILE,
    RUN_FILE,
    RUN_KEYS,
    SERVER_METRICS_FILE,
    SERVER_SOURCE_COUNTERS,
    SERVER_SPANS_FILE,
    SESSION_PRIMER,
    SPEC_DECODE_COUNTERS,
)

# The request columns the analysis reads: those of vllm_stress.core.schema.REQUEST_COLUMNS but UNREAD_REQUEST_COLUMNS.
# Those of the run's format must be present; those a later format added (vllm_stress.core.formats) read as empty in an
# earlier run. Text columns (TEXT_REQUEST_COLUMNS) read as text, the others as numbers.
UNREAD_REQUEST_COLUMNS = {"target_completion_tokens", "status", "worker", "task_id", "step"}
READ_REQUEST_COLUMNS = [column for column in REQUEST_COLUMNS if column not in UNREAD_REQUEST_COLUMNS]
TEXT_REQUEST_COLUMNS = [column for column in READ_REQUEST_COLUMNS if column in REQUEST_TEXT_COLUMNS]
NUMERIC_REQUEST_COLUMNS = [c for c in READ_REQUEST_COLUMNS if c not in TEXT_REQUEST_COLUMNS]

# name -> (file in the run folder, the columns the analysis reads of it: those of the run's format must be there,
# later ones read as NaN). Locust columns: docs/concepts/locust.md §6. A new per-run source plugs in with an entry here and a
# per-level function in levels.py.
OPTIONAL_TABLES = {
    "levels": (LEVELS_FILE, LEVEL_COLUMNS),
    "itl": (ITL_FILE, ITL_COLUMNS),
    "locust_failures": (f"{LOCUST_CSV_PREFIX}_failures.csv", ["Method", "Name", "Error", "Occurrences"]),
    "locust_exceptions": (f"{LOCUST_CSV_PREFIX}_exceptions.csv", ["Count", "Message", "Nodes"]),
    "server": (
        SERVER_METRICS_FILE,
        [
            "time",
            "e2e_count",
            "e2e_sum_s",
            "queue_sum_s",
            "http_count",
            "http_sum_s",
            "frontend_cpu_s",
            "prefix_cache_queries",
            "prefix_cache_hits",
            *EXTERNAL_PREFIX_COUNTERS,
            "replica",
            "max_lora",
            "lora_running",
            "waiting_deferred",
            "resident_memory",
            *SPEC_DECODE_COUNTERS,
            "prefill_count",
            "prefill_sum_s",
            *ENGINE_STEP_COUNTERS,
            *CONNECTOR_COUNTERS,
            *SERVER_SOURCE_COUNTERS,
            *KV_RESIDENCY_COLUMNS,
        ],
    ),
    "client_health": (
        CLIENT_HEALTH_FILE,
        ["time", "worker", "cpu_percent", "loop_lag_ms", "read_behind_p99_ms", "rss_mib"],
    ),
    "gpu": (GPU_METRICS_FILE, ["time", "source", "gpu", "power_w", "utilization_percent"]),
    "spans": (SERVER_SPANS_FILE, ["trace_id", *SERVER_VIEW_COLUMNS.values()]),  # joined to the rows (serverview.py)
    "replica_set": (REPLICAS_FILE, REPLICA_COLUMNS),  # the replica set over time (scaling.py)
}
TEXT_TABLE_COLUMNS = {"Method", "Name", "Error", "Message", "Nodes", "worker", "source", "gpu", "replica", "trace_id"}


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
    notes: list[str] = field(default_factory=list)  # what was left out of the input, and why
    unjoined_spans: int | None = None  # server spans of no row (other clients'); None without server_spans.csv
    canaries: pd.DataFrame = field(default_factory=pd.DataFrame)  # the canaries' rows kept apart from every figure
    primers: pd.DataFrame = field(default_factory=pd.DataFrame)  # the session primers' rows, in no figure either

    @property
    def every_row(self) -> pd.DataFrame:
        """Every request row, the canaries and session primers kept apart included: what the run's accounting
        counts."""
        apart = [rows for rows in (self.canaries, self.primers) if len(rows)]
        return pd.concat([self.requests, *apart], ignore_index=True) if apart else self.requests

    @property
    def format_version(self) -> int:
        """The format the run folder was written in (run.json's, or inferred for a run from before it said)."""
        version: int = self.meta.get(FORMAT_KEY, FORMAT_VERSION)
        return version

    @property
    def interrupted(self) -> bool:
        """run.json says the run did not finish (Ctrl-C, SIGTERM, lost master)."""
        return self.meta.get("complete") is False


def load_run(path: str | Path, canaries_in_figures: bool | None = None) -> Run:
    """Read one run folder, or raise AnalysisError. Its correctness canaries' rows are kept apart from the request
    rows (``Run.canaries``) unless ``canaries_in_figures`` (None: as run.json says, apart when it says nothing); its
    session primers' rows always are (``Run.primers``, --session-primer)."""
    folder = Path(path)
    if not folder.is_dir():
        raise AnalysisError(f"{folder}: not a folder")
    meta = read_meta(folder / RUN_FILE)
    version = run_format(folder, meta)
    requests, notes = read_requests(folder / REQUESTS_FILE, version)
    tables = fleet_tables(read_tables(folder, version=version))
    if "levels" in tables:
        check_levels(folder / LEVELS_FILE, tables)
    later_keys = added_after(version, RUN_FILE)
    meta = {key: None for key in RUN_KEYS if key in later_keys} | meta | {FORMAT_KEY: version}
    requests, unjoined = with_server_view(requests, tables.pop("spans", None))  # every row's span is the run's
    in_figures = bool(meta.get("canaries_in_figures")) if canaries_in_figures is None else canaries_in_figures
    is_primer = requests["name"].fillna("") == SESSION_PRIMER
    is_canary = (requests["canary"].fillna("") != "") & ~is_primer
    primers = requests[is_primer].reset_index(drop=True)
    canaries = requests[is_canary & (not in_figures)].reset_index(drop=True)
    requests = requests[~is_primer & (~is_canary | in_figures)].reset_index(drop=True)
    return Run(folder, requests, tables, meta, notes, unjoined, canaries, primers)


def fleet_tables(tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """With several replicas in server_metrics.csv: their rows kept as "server_replicas" and "server" their sum at
    each scrape (vllm_stress.core.fleet.combine), so a fleet reads like one server; else the tables as they are."""
    server = tables.get("server")
    if server is None or server["replica"].dropna().nunique() < 2:
        return tables
    how = {column: fleet.combine(column) for column in server.columns if column not in ("time", "replica")}
    summed = server.groupby("time", as_index=False).agg(how)
    for column, combined in how.items():
        if combined == "sum":
            summed[column] = server.groupby("time")[column].sum(min_count=1).to_numpy()
    return tables | {"server": summed.assign(replica=""), "server_replicas": server}


def run_format(folder: Path, meta: RunMeta) -> int:
    """The run folder's format: run.json's ``format_version``, or for a run written before it said, the newest
    format without it whose request columns requests.csv has (the oldest when none: its missing columns are named)."""
    if FORMAT_KEY in meta:
        try:
            return format_of(meta[FORMAT_KEY]).version
        except FormatError as error:
            raise AnalysisError(f"{folder / RUN_FILE}: {error}") from None
    header = set(header_of(folder / REQUESTS_FILE)) if (folder / REQUESTS_FILE).is_file() else set()
    unsaid = [f.version for f in FORMATS if FORMAT_KEY in added_after(f.version, RUN_FILE)]
    fitting = [v for v in unsaid if set(REQUEST_COLUMNS) - added_after(v, REQUESTS_FILE) <= header]
    return max(fitting, default=min(unsaid))


def read_tables(
    folder: Path, names: Iterable[str] = OPTIONAL_TABLES, version: int = FORMAT_VERSION
) -> dict[str, pd.DataFrame]:
    """The optional tables ``names`` (of OPTIONAL_TABLES) that the run folder has, the columns a later format than
    ``version`` added NaN when the run lacks them; AnalysisError for an unreadable one. (The live dashboard reads
    the server's and the clients' tables of a running run this way too.)"""
    tables = {}
    for name in names:
        file_name, columns = OPTIONAL_TABLES[name]
        if (folder / file_name).is_file():
            later = added_after(version, file_name)
            table = read_table(folder / file_name, [c for c in columns if c not in later])
            for column in columns:
                if column not in table:
                    table[column] = float("nan")
            require_numeric(folder / file_name, table, [c for c in columns if c not in TEXT_TABLE_COLUMNS])
            tables[name] = table
    return tables


def read_requests(path: Path, version: int = FORMAT_VERSION) -> tuple[pd.DataFrame, list[str]]:
    """requests.csv of format ``version`` with the columns the analysis uses (those added later empty; users as int,
    ok as bool), and a note when its half-written last line was dropped."""
    if not path.is_file():
        raise AnalysisError(f"{path}: file missing")
    later = added_after(version, REQUESTS_FILE)
    check_header(path, [column for column in READ_REQUEST_COLUMNS if column not in later])
    try:
        rows = pd.read_csv(
            path,
            usecols=lambda column: column in READ_REQUEST_COLUMNS,
            dtype=dict.fromkeys(TEXT_REQUEST_COLUMNS, "string"),
        )
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not a readable CSV ({unreadable(exc)})") from None
    for column in READ_REQUEST_COLUMNS:  # added by a later format than the run's
        if column not in rows:
            rows[column] = (
                pd.Series(pd.NA, index=rows.index, dtype="string") if column in TEXT_REQUEST_COLUMNS else float("nan")
            )
    notes = []
    if not rows.empty and pd.isna(rows["users"].iloc[-1]):
        notes.append(f"{REQUESTS_FILE} line {len(rows) + 1}: half-written (its writer was killed), left out")
        rows = rows.iloc[:-1]
    if rows.empty:
        raise AnalysisError(f"{path}: empty run (no request rows)")
    require_numeric(path, rows, NUMERIC_REQUEST_COLUMNS)
    for column in ("start_time", "end_time", "e2e_s", "ok", "users"):
        if rows[column].isna().any():
            raise AnalysisError(f"{path}: column {column} has empty values (line {line_of(rows[column].isna())})")
    backwards = rows["end_time"] < rows["start_time"]
    if backwards.any():
        raise AnalysisError(f"{path}: a request ends before it starts (line {line_of(backwards)})")
    rows["users"] = rows["users"].astype("int64")
    rows["ok"] = rows["ok"].astype(bool)
    rows["count_mismatch"] = rows["count_mismatch"].fillna(0).astype(bool)
    return rows, notes


def read_table(path: Path, columns: list[str]) -> pd.DataFrame:
    """An optional CSV with its required columns checked."""
    check_header(path, columns)
    try:
        return pd.read_csv(path, dtype={"trace_id": "string"})  # hex digits that may all be decimal ones
    except (pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not a readable CSV ({unreadable(exc)})") from None


def header_of(path: Path) -> list[str]:
    """The CSV's column names."""
    try:
        return list(pd.read_csv(path, nrows=0).columns)
    except (pd.errors.EmptyDataError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not a readable CSV ({exc.__class__.__name__})") from None


def check_header(path: Path, columns: list[str]) -> None:
    """Raise when the CSV's header lacks one of ``columns``."""
    header = header_of(path)
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
