"""A dataset file's records: JSON lines, or the rows of a Parquet table (the format the Hugging Face Hub keeps its
datasets in, read with pyarrow), each numbered for a one-line error (``file:line``, ``file:row N``)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

PARQUET_MAGIC = b"PAR1"  # a Parquet file opens (and ends) with these four bytes


def is_parquet(path: str) -> bool:
    """Whether ``path`` is a Parquet file, by its magic number (whatever its name)."""
    with open(path, "rb") as f:
        return f.read(len(PARQUET_MAGIC)) == PARQUET_MAGIC


def parquet_columns(path: str) -> list[str]:
    """The column names of a Parquet file, read from its footer alone."""
    import pyarrow.parquet  # here, not above: a Locust process without a Parquet dataset does not load pyarrow

    with unreadable_as_value_error(path):
        return list(pyarrow.parquet.read_schema(path).names)


def parquet_rows(path: str) -> list[dict[str, Any]]:
    """Every row of a Parquet file as a dict of Python values (a list column as a list, a struct as a dict)."""
    import pyarrow.parquet

    with unreadable_as_value_error(path):
        return pyarrow.parquet.read_table(path).to_pylist()


@contextmanager
def unreadable_as_value_error(path: str) -> Iterator[None]:
    """pyarrow's errors for a file it cannot read as one line naming the file."""
    try:
        yield
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        raise ValueError(f"{path}: not a readable Parquet file ({e})") from None


def records(path: str) -> Iterator[tuple[str, Any]]:
    """Each record of ``path`` with its place: a Parquet file's rows, else its non-blank JSON lines (a line that is no
    JSON raises ValueError with its place)."""
    if is_parquet(path):
        for number, row in enumerate(parquet_rows(path), 1):
            yield f"{path}: row {number}", row
        return
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield f"{path}:{number}", json.loads(line)
                except ValueError as e:
                    raise ValueError(f"{path}:{number}: not a JSON line ({e})") from None
