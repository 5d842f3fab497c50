"""The files of a run folder: ``requests.csv``, ``levels.csv``, ``itl_histogram.csv``, ``run.json``, Locust's CSVs."""

from __future__ import annotations

import csv
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from vllm_stress.core import schema
from vllm_stress.master.csvappender import CsvAppender

if TYPE_CHECKING:
    from locust.env import Environment


class RunFolderExists(Exception):
    pass


def default_path() -> str:
    return os.path.join("results", time.strftime("run-%Y%m%d-%H%M%S"))


class RunFolder:
    def __init__(self, path: str, overwrite: bool = False) -> None:
        requests_path = os.path.join(path, schema.REQUESTS_FILE)
        if os.path.exists(requests_path) and not overwrite:
            raise RunFolderExists(
                f"{path} already holds a run ({schema.REQUESTS_FILE}); choose another --results-dir or pass --overwrite"
            )
        os.makedirs(path, exist_ok=True)
        self.path = path
        self._requests = CsvAppender(path, schema.REQUESTS_FILE, schema.REQUEST_COLUMNS)
        self._levels = CsvAppender(path, schema.LEVELS_FILE, schema.LEVEL_COLUMNS)
        self._side: dict[str, CsvAppender] = {}  # schema.SIDE_FILES, each opened with its first row

    def write_rows(self, rows: list[list[Any]]) -> None:
        if rows:
            self._requests.write_rows(rows)

    def write_side(self, file: str, rows: Sequence[list[Any]]) -> None:
        """Rows of a file beside requests.csv (``schema.SIDE_FILES``: answers.csv, tasks.csv)."""
        if file not in self._side:
            self._side[file] = CsvAppender(self.path, file, schema.SIDE_FILES[file])
        self._side[file].write_rows(rows)

    def write_level(self, users: int, ramp_start: float, hold_start: float, hold_end: float) -> None:
        self._levels.write([users, round(ramp_start, 3), round(hold_start, 3), round(hold_end, 3)])

    def write_itl(self, histogram: Mapping[int, Mapping[float, int]]) -> None:
        """Rewrite the ITL histogram (level -> {bucket ms: count}) through a temporary file."""
        tmp = os.path.join(self.path, schema.ITL_FILE + ".tmp")
        with open(tmp, "w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            writer.writerow(schema.ITL_COLUMNS)
            for users in sorted(histogram):
                writer.writerows([users, ms, n] for ms, n in sorted(histogram[users].items()))
        os.replace(tmp, os.path.join(self.path, schema.ITL_FILE))

    def write_run(self, meta: dict[str, Any]) -> None:
        unknown = set(meta) - set(schema.RUN_KEYS)
        assert not unknown, f"run.json keys not in schema.RUN_KEYS: {unknown}"
        tmp = os.path.join(self.path, schema.RUN_FILE + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(meta, f, indent=2)
        os.replace(tmp, os.path.join(self.path, schema.RUN_FILE))

    def close(self) -> None:
        self._requests.close()
        self._levels.close()
        for appender in self._side.values():
            appender.close()


def write_final_locust_csvs(environment: Environment, prefix: str) -> None:
    """Write Locust's ``--csv`` files once more with the final numbers (Locust rewrites them every second only);
    each is replaced, not rewritten in place, since Locust's own writer still holds the old one open."""
    from locust.stats import PERCENTILES_TO_REPORT, StatsCSV

    snapshot = StatsCSV(environment, PERCENTILES_TO_REPORT)
    for suffix, write in (
        ("stats", snapshot.requests_csv),
        ("failures", snapshot.failures_csv),
        ("exceptions", snapshot.exceptions_csv),
    ):
        path = f"{prefix}_{suffix}.csv"
        with open(path + ".tmp", "w", newline="", encoding="utf-8") as f:
            write(csv.writer(f))
        os.replace(path + ".tmp", path)
