"""A CSV file of the run folder written as rows arrive, each batch flushed (a killed run keeps what it measured)."""

from __future__ import annotations

import csv
import os
from collections.abc import Iterable, Sequence


class CsvAppender:
    """A CSV file with its header; every ``write`` and ``write_rows`` reaches the disk at once."""

    def __init__(self, folder: str, name: str, columns: Sequence[str]) -> None:
        self.file = open(os.path.join(folder, name), "w", newline="", encoding="utf-8")  # noqa: SIM115 (kept open)
        self.writer = csv.writer(self.file)
        self.write(columns)

    def write(self, row: Sequence[object]) -> None:
        self.write_rows([row])

    def write_rows(self, rows: Iterable[Sequence[object]]) -> None:
        self.writer.writerows(rows)
        self.file.flush()

    def close(self) -> None:
        self.file.close()
