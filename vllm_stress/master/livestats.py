"""What the web UI shows live of the rows received: latencies per level, recent latencies, output tokens per second;
the correctness canaries' rows apart, per level, unless --canaries-in-figures."""

from __future__ import annotations

import time
from collections import Counter, defaultdict, deque
from typing import Any

from vllm_stress.core import schema
from vllm_stress.master import rows

RECENT_ROWS = 20_000  # measured requests kept for the live latency charts
TOKENS_WINDOW_S = 10.0


class LevelLatencies:
    """The requests that started at one level, their latencies as histograms ({bucket ms: count}): the master's
    memory does not grow with the run (the analysis reads requests.csv instead)."""

    __slots__ = ("requests", "failures", "aborted", "ttft_ms", "tpot_ms", "e2e_ms")

    def __init__(self) -> None:
        self.requests = 0  # successes and failures; aborted streams apart
        self.failures = 0
        self.aborted = 0
        self.ttft_ms: Counter[float] = Counter()  # of measured requests only, like tpot_ms and e2e_ms
        self.tpot_ms: Counter[float] = Counter()
        self.e2e_ms: Counter[float] = Counter()

    def add(self, row: list[Any]) -> None:
        if rows.apart(row):  # cut by the stop, or cancelled by the client: in no figure of the live view
            self.aborted += rows.aborted(row)
            return
        self.requests += 1
        if not row[rows.OK]:
            self.failures += 1
            return
        if not rows.measured(row):
            return
        self.e2e_ms[schema.latency_bucket_ms(row[rows.E2E])] += 1
        if row[rows.TTFT] != "":
            self.ttft_ms[schema.latency_bucket_ms(row[rows.TTFT])] += 1
        if row[rows.TPOT] != "":
            self.tpot_ms[schema.latency_bucket_ms(row[rows.TPOT])] += 1


class LiveStats:
    """The rows received so far, summed for the live view; ``report_lag_s``: how late rows reach this process."""

    def __init__(self, report_lag_s: float, canaries_in_figures: bool = False) -> None:
        self.report_lag_s = report_lag_s
        self.canaries_in_figures = canaries_in_figures
        self.canaries_by_level: dict[int, LevelLatencies] = defaultdict(LevelLatencies)  # kept apart from the rest
        self.latencies_by_level: dict[int, LevelLatencies] = defaultdict(LevelLatencies)
        self.latencies_by_class: dict[tuple[int, str], LevelLatencies] = defaultdict(LevelLatencies)  # --traffic-class
        # (end, ttft, tpot, ttfa) of measured ones; ttfa "" but for a reasoning model's rows (reasoning_tokens said)
        self.recent: deque[tuple[float, Any, Any, Any]] = deque(maxlen=RECENT_ROWS)
        self.tokens_by_second: Counter[int] = Counter()  # output tokens by the second their request ended

    def add(self, new_rows: list[list[Any]]) -> None:
        for row in new_rows:
            if not rows.in_figures(row, self.canaries_in_figures):
                if row[rows.CANARY]:  # a session primer's is in no live figure, the canaries' neither
                    self.canaries_by_level[row[rows.USERS]].add(row)
                continue
            self.latencies_by_level[row[rows.USERS]].add(row)
            if row[rows.CLASS]:
                self.latencies_by_class[row[rows.USERS], row[rows.CLASS]].add(row)
            if rows.measured(row):
                ttfa = row[rows.TTFA] if row[rows.REASONING] != "" else ""
                self.recent.append((row[rows.END], row[rows.TTFT], row[rows.TPOT], ttfa))
            if row[rows.COMPLETION] != "":
                self.tokens_by_second[int(row[rows.END])] += row[rows.COMPLETION]

    def clear(self) -> None:
        """A new run: its levels start empty."""
        self.latencies_by_level.clear()
        self.latencies_by_class.clear()
        self.canaries_by_level.clear()

    def output_tokens_per_s(self, window_s: float = TOKENS_WINDOW_S, now: float | None = None) -> float:
        """Output tokens/s over the last ``window_s`` seconds that every process has reported."""
        end = int((time.time() if now is None else now) - self.report_lag_s)
        return sum(self.tokens_by_second[s] for s in range(end - int(window_s), end)) / window_s
