"""A run folder's CSV files (requests.csv, levels.csv, client_health.csv ...) read as rows, once for whoever reads
them outside the analysis' tables: the live bound, ``plan --from-run`` and the tests and benchmarks."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any


def read_rows(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file as {column: text}, in file order; none when the file is not there."""
    if not path.is_file():
        return []
    with path.open(newline="") as file:
        return list(csv.DictReader(file))


def numeric_rows(path: Path) -> list[dict[str, Any]]:
    """The rows of a CSV file sorted by their ``time`` column (when it has one), numbers as floats, NaN where empty,
    other text (a worker's name) as it is."""
    rows = [{key: number(value) for key, value in row.items()} for row in read_rows(path)]
    return sorted(rows, key=lambda row: row.get("time", 0.0))


def number(text: str | None) -> float | str:
    if not text:
        return math.nan
    try:
        return float(text)
    except ValueError:
        return text
