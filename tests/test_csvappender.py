"""The run folder's appended CSV files: header first, every row on disk as soon as it is written."""

from __future__ import annotations

import csv

from vllm_stress.master.csvappender import CsvAppender


def read(path) -> list[list[str]]:
    with open(path, newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def test_rows_reach_the_disk_before_the_file_is_closed(tmp_path):
    appender = CsvAppender(str(tmp_path), "x.csv", ["a", "b"])
    assert read(tmp_path / "x.csv") == [["a", "b"]]
    appender.write([1, 2.5])
    appender.write_rows([[3, ""], [4, "y"]])
    assert read(tmp_path / "x.csv") == [["a", "b"], ["1", "2.5"], ["3", ""], ["4", "y"]]  # still open: flushed
    appender.close()
    assert appender.file.closed
