"""Trace replay (``--trace``): Mooncake, Bailian, Azure and BurstGPT traces read, and each process's share of them
as an arrival clock."""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import logging
from dataclasses import dataclass, replace
from datetime import datetime

from .pacing import Schedule, sleep_until

log = logging.getLogger(__name__)

MOONCAKE_BLOCK_TOKENS = 512  # tokens of one hash id of a Mooncake trace (its FAST'25 paper's block)
BAILIAN_BLOCK_TOKENS = 16  # of Alibaba's Bailian traces (qwen-bailian-usagetraces-anon: salted hashes of 16 tokens)


@dataclass(frozen=True)
class TraceLine:
    at_s: float  # seconds after the trace's first line (after --speedup)
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()
    block_tokens: int = MOONCAKE_BLOCK_TOKENS  # tokens of one of its hash ids' blocks, as its format has them


BURSTGPT_COLUMN = "Request tokens"  # a CSV whose header has it is BurstGPT's, else Azure's


def read_text(path: str) -> str:
    """A trace file's text, gzip-compressed when its name ends in ``.gz``."""
    if path.endswith(".gz"):
        with gzip.open(path, "rt", encoding="utf-8") as packed:
            return packed.read()
    with open(path, encoding="utf-8") as plain:
        return plain.read()


@dataclass(frozen=True)
class JsonTraceFormat:
    """What a JSON trace line's format says of its fields: its timestamp's unit and its hash ids' block size."""

    timestamp_s: float  # seconds of one unit of its timestamp
    block_tokens: int


MOONCAKE = JsonTraceFormat(0.001, MOONCAKE_BLOCK_TOKENS)  # timestamps in ms; also the session traces' lines
BAILIAN = JsonTraceFormat(1.0, BAILIAN_BLOCK_TOKENS)


def json_format(item: dict) -> JsonTraceFormat:
    """The format of one JSON trace line: Alibaba's Bailian (``chat_id``, ``parent_chat_id``, ``turn``, timestamp in
    seconds) or else Mooncake's (timestamp in milliseconds; a session trace's lines have a ``session_id`` too)."""
    return BAILIAN if "chat_id" in item and "session_id" not in item else MOONCAKE


def read_trace(path: str) -> list[TraceLine]:
    """The lines of a Mooncake or Bailian JSONL (plain or ``.gz``), Azure CSV or BurstGPT CSV trace, in time order,
    times from the first; ValueError with the file and line for anything else."""
    text = read_text(path)
    if not path.removesuffix(".gz").endswith(".csv"):
        lines = read_jsonl(path, text)
    elif BURSTGPT_COLUMN in text.partition("\n")[0]:
        lines = read_burstgpt(path, text)
    else:
        lines = read_azure(path, text)
    if not lines:
        raise ValueError(f"{path}: no requests in the trace")
    lines.sort(key=lambda line: line.at_s)
    first = lines[0].at_s
    return [replace(line, at_s=line.at_s - first) for line in lines]


def read_jsonl(path: str, text: str) -> list[TraceLine]:
    """Mooncake's lines (timestamp ms, input_length, output_length, hash_ids of 512 tokens) or Bailian's (the same
    fields with the timestamp in seconds and blocks of 16 tokens; each line the whole request as the service got it,
    a follow-up's history included, so each is replayed as it stands)."""
    lines = []
    for number, raw in enumerate(text.splitlines(), 1):
        if not raw.strip():
            continue
        try:
            item = json.loads(raw)
            fmt = json_format(item)
            lines.append(
                TraceLine(
                    float(item["timestamp"]) * fmt.timestamp_s,
                    int(item["input_length"]),
                    int(item["output_length"]),
                    tuple(int(h) for h in item.get("hash_ids") or ()),
                    fmt.block_tokens,
                )
            )
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(
                f"{path}:{number}: not a Mooncake or Bailian trace line ({type(e).__name__}: {e})"
            ) from None
    return lines


def read_azure(path: str, text: str) -> list[TraceLine]:
    lines = []
    for number, row in enumerate(csv.DictReader(text.splitlines()), 2):
        try:
            stamp = datetime.fromisoformat(row["TIMESTAMP"].strip()[:26])  # 7-digit fractions: microseconds kept
            lines.append(TraceLine(stamp.timestamp(), int(row["ContextTokens"]), int(row["GeneratedTokens"])))
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise ValueError(f"{path}:{number}: not an Azure trace row ({type(e).__name__}: {e})") from None
    return lines


def read_burstgpt(path: str, text: str) -> list[TraceLine]:
    """BurstGPT's CSV (Timestamp in seconds, Model, Request tokens, Response tokens, Total tokens, Log Type). A row
    whose Response tokens are 0 was a request that failed in the recorded service: it is left out, as BurstGPT's own
    "without fails" files leave it, and the count said."""
    lines, failed = [], 0
    for number, row in enumerate(csv.DictReader(text.splitlines()), 2):
        try:
            output = int(row["Response tokens"])
            if output == 0:
                failed += 1
                continue
            lines.append(TraceLine(float(row["Timestamp"]), int(row[BURSTGPT_COLUMN]), output))
        except (ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}:{number}: not a BurstGPT trace row ({type(e).__name__}: {e})") from None
    if failed:
        log.info("%s: %d requests that failed in the recorded service (Response tokens 0) left out", path, failed)
    return lines


def select(lines: list[TraceLine], start_s: float, duration_s: float, speedup: float) -> list[TraceLine]:
    """The window [start_s, start_s + duration_s) of the trace (all of it for duration 0), times from the window's
    start divided by ``speedup``."""
    end = start_s + duration_s if duration_s > 0 else float("inf")
    return [replace(line, at_s=(line.at_s - start_s) / speedup) for line in lines if start_s <= line.at_s < end]


class TraceDone(Exception):
    """This process has sent its share of the trace (its users stop)."""


class TraceArrivals(Schedule):
    """This process's share of the trace as an arrival clock: ``wait`` takes the next line, sleeps until its time
    from the schedule's start and returns how late it is sent; ``last`` is the line it took (read at once by the same
    user, before it yields)."""

    def __init__(self, lines: list[TraceLine]) -> None:
        super().__init__()
        self.lines = lines
        self.next_index = 0
        self.returned: list[TraceLine] = []  # taken by users stopped before their time: the next waiters take them
        self.last: TraceLine | None = None
        self.late = 0

    def take(self) -> TraceLine:
        """The earliest line not sent: one a stopped user gave back, or the next one; TraceDone after the last."""
        if self.returned:
            line = min(self.returned, key=lambda returned: returned.at_s)
            self.returned.remove(line)
            return line
        if self.next_index >= len(self.lines):
            raise TraceDone()
        self.next_index += 1
        return self.lines[self.next_index - 1]

    def wait(self) -> float:
        line = self.take()
        try:
            lag = sleep_until(self.start() + line.at_s)  # every user was busy, or the process woke late
        except BaseException:  # the user was stopped while it waited (a load shape lowering the users)
            self.returned.append(line)
            raise
        self.last = line
        self.late += lag > 1.0
        return lag

    def summary(self) -> str:
        return (
            f"Trace replay: {self.next_index - len(self.returned)} of {len(self.lines)} lines sent by this process, "
            f"{self.late} more "
            "than 1 s late"
        )


def arrivals_for_trace(options: argparse.Namespace, lines: list[TraceLine], worker_index: int) -> TraceArrivals:
    """This process's share of the selected lines: every ``workers``-th from its index."""
    workers = max(getattr(options, "expect_workers", 1) or 1, 1) if getattr(options, "worker", False) else 1
    selected = select(lines, options.trace_start, options.trace_duration, options.speedup)
    return TraceArrivals(selected[worker_index % workers :: workers])
