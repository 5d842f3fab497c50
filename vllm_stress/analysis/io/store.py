"""The results store: analysed runs appended to one SQLite file (``--db PATH`` or ``VLLM_STRESS_DB``), read back
by ``python -m analysis history`` and as ``db:ID`` sources of ``compare`` (docs/concepts/analysis.md)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path
from typing import cast

import pandas as pd

from vllm_stress.analysis import stats
from vllm_stress.analysis.io.json_types import Json, to_json_types
from vllm_stress.analysis.io.load import AnalysisError, Run, RunMeta
from vllm_stress.analysis.measures import HEADLINE, records
from vllm_stress.analysis.summary import ConfigSummary, Summary
from vllm_stress.core.formats import FORMAT_VERSION, FormatError, format_of
from vllm_stress.core.numbers import count

DB_ENV = "VLLM_STRESS_DB"
SUITE = Path(__file__).resolve().parents[2]
StoredRun = tuple[str, Run, pd.DataFrame]  # an analysed run: its config label, the run, its level_stats rows
SCHEMA = f"""
CREATE TABLE runs (
    id INTEGER PRIMARY KEY, recorded REAL, dir TEXT, label TEXT, target TEXT, model TEXT, scenario TEXT,
    complete INTEGER, server_version TEXT, suite_commit TEXT, meta TEXT, verdicts TEXT, format_version INTEGER);
CREATE TABLE levels (
    run_id INTEGER REFERENCES runs(id), users INTEGER, steady INTEGER, steady_reason TEXT, bound TEXT,
    {", ".join(f"{field} REAL" for field in HEADLINE)}, fields TEXT, PRIMARY KEY (run_id, users));
PRAGMA user_version = {FORMAT_VERSION};
"""
# The store's format is SQLite's user_version: 0 in the stores of the releases before formats were numbered (they
# held runs of format 2 only: those releases' analysis read no other). An older store is upgraded in place by the
# steps from its version on, after a backup beside it.
UNNUMBERED = 2
UPGRADES = {
    2: "ALTER TABLE runs ADD COLUMN format_version INTEGER; UPDATE runs SET format_version = 2;",
    3: "",  # format 4 added files, columns and summary fields to the run folder, no table or column to the store
    4: "",  # format 5 added columns and run.json keys to the run folder, nothing to the store
}


def default_db() -> str | None:
    """The store named by VLLM_STRESS_DB, or None."""
    return os.environ.get(DB_ENV) or None


def connect(db: str | Path) -> sqlite3.Connection:
    """The store: created if new, upgraded in place if older (one line on stderr names its backup); AnalysisError
    for a file that is not a store or a store newer than this suite."""
    try:
        connection = sqlite3.connect(db)
        version = store_format(connection)
        if version is None:
            connection.executescript(SCHEMA)
        elif version < FORMAT_VERSION:
            upgrade(connection, Path(db), version)
    except sqlite3.Error as exc:
        raise AnalysisError(f"{db}: not a usable results store ({exc})") from None
    except FormatError as exc:
        raise AnalysisError(f"{db}: results store {exc}") from None
    return connection


def store_format(connection: sqlite3.Connection) -> int | None:
    """The store's format, None for a new (empty) file; FormatError for one newer than this suite."""
    (version,) = connection.execute("PRAGMA user_version").fetchone()
    if version == 0:
        tables = connection.execute("SELECT COUNT(*) FROM sqlite_master WHERE name = 'runs'").fetchone()[0]
        return UNNUMBERED if tables else None
    return format_of(version).version


def upgrade(connection: sqlite3.Connection, db: Path, version: int) -> None:
    """Back the store up beside itself (``<db>.format-<version>.bak``), then apply the steps from ``version`` on."""
    backup = db.with_name(f"{db.name}.format-{version}.bak")
    with closing(sqlite3.connect(backup)) as copy:
        connection.backup(copy)
    steps = "".join(UPGRADES[step] for step in range(version, FORMAT_VERSION))
    connection.executescript(f"BEGIN; {steps} PRAGMA user_version = {FORMAT_VERSION}; COMMIT;")
    print(
        f"upgraded the results store {db} from format {version} to {FORMAT_VERSION} (backup: {backup})", file=sys.stderr
    )


def suite_commit() -> str | None:
    """The suite's git commit, or None outside a git checkout."""
    try:
        found = subprocess.run(
            ["git", "-C", str(SUITE), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return found.stdout.strip() or None if found.returncode == 0 else None


def record(db: str | Path, summary: Summary, analysed: list[StoredRun]) -> list[int]:
    """Append the analysed runs — (config label, run, its per-level rows from ``level_stats``) — with their config's
    verdicts; returns their ids."""
    commit, ids = suite_commit(), []
    with closing(connect(db)) as connection, connection:
        for label, run, levels in analysed:
            run_id = insert_run(connection, label, run, summary["configs"][label], commit)
            insert_levels(connection, run_id, levels)
            ids.append(run_id)
    return ids


def insert_run(connection: sqlite3.Connection, label: str, run: Run, config: ConfigSummary, commit: str | None) -> int:
    """One row of ``runs``; its id."""
    meta = run.meta
    verdicts = {
        "peak": config["peak"],
        "saturation_users": config["saturation_users"],
        "knee_users": config["knee_users"],
        "recommendations": config["recommendations"],
        "classes": config.get("classes"),  # the report per traffic class (analysis/features/class_levels.py), or None
    }
    cursor = connection.execute(
        "INSERT INTO runs (recorded, dir, label, target, model, scenario, complete, server_version, "
        "suite_commit, meta, verdicts, format_version) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            time.time(),
            str(run.path.resolve()),
            label,
            meta.get("target"),
            meta.get("model"),
            meta.get("scenario"),
            meta.get("complete") is not False,
            meta.get("server_version"),
            commit,
            json.dumps(meta),
            json.dumps(verdicts),
            run.format_version,
        ),
    )
    return cast(int, cursor.lastrowid)  # an INSERT sets it (None only before any)


def insert_levels(connection: sqlite3.Connection, run_id: int, levels: pd.DataFrame) -> None:
    """The rows of ``levels`` of one run: verdict, bound and headline metrics as columns, every field as JSON."""
    rows = cast(list[dict[str, Json]], to_json_types(records(levels.assign(bound=stats.bounds(levels)))))
    connection.executemany(
        f"INSERT INTO levels VALUES (?, ?, ?, ?, ?, {', '.join('?' * len(HEADLINE))}, ?)",
        [
            (
                run_id,
                row["users"],
                row["steady"],
                row["steady_reason"],
                row["bound"],
                *(row.get(field) for field in HEADLINE),
                json.dumps(row),
            )
            for row in rows
        ],
    )


def run_levels(db: str | None, run_id: str) -> pd.DataFrame:
    """The level rows of one stored run, as ``level_stats`` made them."""
    if not db:
        raise AnalysisError(f"db:{run_id}: no results store given (--db PATH or {DB_ENV})")
    if not Path(db).is_file():
        raise AnalysisError(f"{db}: no such results store")
    with closing(connect(db)) as connection:
        rows = connection.execute("SELECT fields FROM levels WHERE run_id = ? ORDER BY users", (run_id,)).fetchall()
    if not rows:
        raise AnalysisError(f"db:{run_id}: no such run in {db}")
    return pd.DataFrame([json.loads(fields) for (fields,) in rows])


def run_meta(db: str | None, run_id: str) -> RunMeta:
    """The run.json of one stored run ({} when the store or the run is missing: run_levels says why)."""
    if not db or not Path(db).is_file():
        return {}
    with closing(connect(db)) as connection:
        row = connection.execute("SELECT meta FROM runs WHERE id = ?", (run_id,)).fetchone()
    meta: RunMeta = json.loads(row[0] or "{}") if row else {}
    return meta


HISTORY_COLUMNS = ("id", "recorded", "label", "model", "scenario", "target", "levels", "steady", "peak", "dir")


def history(
    db: str | Path, model: str = "", scenario: str = "", label: str = "", limit: int = 50
) -> list[dict[str, str | int | None]]:
    """The newest ``limit`` runs, filtered by substrings of model, scenario and label."""
    query = (
        "SELECT runs.id, runs.recorded, label, model, scenario, target, COUNT(levels.users), "
        "SUM(levels.steady), verdicts, dir FROM runs LEFT JOIN levels ON levels.run_id = runs.id "
        "WHERE IFNULL(model, '') LIKE ? AND IFNULL(scenario, '') LIKE ? AND label LIKE ? "
        "GROUP BY runs.id ORDER BY runs.id DESC LIMIT ?"
    )
    with closing(connect(db)) as connection:
        rows = connection.execute(query, (f"%{model}%", f"%{scenario}%", f"%{label}%", limit)).fetchall()
    runs = [dict(zip(HISTORY_COLUMNS, row, strict=True)) for row in rows]
    for run in runs:
        peak = json.loads(run["peak"] or "{}").get("peak")
        run["peak"] = f"{count(peak['output_tokens_per_s'])} tok/s at {peak['users']}" if peak else "-"
        run["recorded"] = time.strftime("%Y-%m-%d %H:%M", time.gmtime(run["recorded"]))
        run["id"] = f"db:{run['id']}"
    return runs
