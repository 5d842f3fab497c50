"""The open level's requests as the master knows them live, for the load shape to judge whether its hold is steady
and whether a --stop-on rule trips (the correctness canaries' apart, unless --canaries-in-figures), and the server's
queue as scraped."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from locust.runners import STATE_MISSING

from vllm_stress.core import schema, steady
from vllm_stress.core.metrics import in_window, percentile, streamed_tokens
from vllm_stress.core.slo import FAILURES, StopRule
from vllm_stress.core.stopon import WAITING
from vllm_stress.master import hooks, rows
from vllm_stress.master.rows import in_figures  # the hook's keyword ``rows`` hides the module in _on_rows

if TYPE_CHECKING:
    from locust.env import Environment
    from locust.runners import Runner

ROWS_LIMIT = 500_000  # rows kept (a level's, a few hundred bytes each)


class LevelWindow:
    """The rows of the requests that ended since the open level's ramp began, and the latest in-flight reports."""

    def __init__(self, runner: Runner) -> None:
        self.runner = runner
        self.canaries_counted = rows.canaries_counted(runner.environment)
        self.users = 0
        self.hold_start: float | None = None
        self.rows: list[list[Any]] = []
        self.reports: dict[str, tuple[float, list[list[float]]]] = {}  # source -> (report time, its requests in flight)
        self.scrapes: list[dict[str, float]] = []  # the server's (time, waiting) since the open level's ramp began
        hooks.rows_received.add_listener(self._on_rows)
        hooks.in_flight_reported.add_listener(self._on_in_flight)
        hooks.server_scraped.add_listener(self._on_scrape)

    def start(self, users: int) -> None:
        """A level's ramp begins: keep only rows from now on."""
        now = time.time()
        self.users, self.hold_start = users, None
        self.rows = [row for row in self.rows if row[rows.END] >= now]
        self.scrapes = []

    def hold(self) -> None:
        self.hold_start = time.time()

    def completions(self) -> int:
        """Requests of the open level that ended since its ramp began (aborted ones apart)."""
        return sum(1 for row in self.rows if row[rows.USERS] == self.users and not rows.aborted(row))

    def verdict(self) -> steady.Verdict:
        """The steady-state verdict on the hold so far."""
        sample = self.sample()
        if sample is None:
            return steady.Verdict(False, "the level is not held", np.nan, np.nan)
        return steady.judge(*sample)

    def end(self, environment: Environment, users: int, hold_end: float | None = None) -> steady.Verdict:
        """The hold is over: its verdict, told with the hold's figures to the suite (hooks.level_ended)."""
        verdict = self.verdict()
        hooks.level_ended.fire(
            environment=environment,
            users=users,
            verdict=verdict,
            output_tokens_per_s=self.output_tokens_per_s(),
            schedule_lag_p99_s=self.schedule_lag_p99_s(),
            hold_end=hold_end,
        )
        return verdict

    def known_until(self) -> float:
        """The end of the window the verdict judges: the time up to which every live process has reported."""
        return self.in_flight()[0]

    def output_tokens_per_s(self) -> float:
        """Output tokens/s streamed during the hold so far (vllm_stress.core.metrics.streamed_tokens)."""
        sample = self.sample()
        if sample is None or sample[1] <= sample[0]:
            return np.nan
        start, end, requests = sample
        return streamed_tokens(requests.first, requests.end, requests.tokens, start, end) / (end - start)

    def schedule_lag_p99_s(self) -> float:
        """The p99 schedule lag of the open level's measured requests that ended in its hold so far (NaN in a closed
        loop), as the report's schedule_lag_p99_s (vllm_stress.core.metrics.percentile): an input of its bound."""
        if self.hold_start is None:
            return np.nan
        lags = [
            row[rows.SCHEDULE_LAG]
            for row in self.rows
            if row[rows.END] >= self.hold_start
            and row[rows.USERS] == self.users
            and rows.measured(row)
            and row[rows.SCHEDULE_LAG] != ""
        ]
        return percentile(np.array(lags, dtype=float), 99)

    def measures(self, rules: Sequence[StopRule], start: float, end: float) -> dict[str, float]:
        """The open level's requests that ended in ``[start, end)`` measured as the report measures a level's window
        (vllm_stress.analysis.levels): ``requests`` (successes and failures: aborted and cancelled ones apart), of
        which ``failures``, and each percentile rule's field (``ttft_p99_s``) over the measured ones
        (vllm_stress.core.metrics.percentile)."""
        ended = [row for row in self.rows if row[rows.USERS] == self.users and in_window(row[rows.END], start, end)]
        counted = [row for row in ended if not rows.apart(row)]
        level = {"requests": float(len(counted)), FAILURES: float(sum(1 for row in counted if not row[rows.OK]))}
        measured = [row for row in counted if rows.measured(row)]
        for rule in rules:
            if rule.column:
                index = schema.REQUEST_COLUMNS.index(rule.column)
                values = np.array([np.nan if row[index] == "" else row[index] for row in measured], dtype=float)
                level[rule.field] = percentile(values, rule.percentile)
        return level

    def sample(self) -> tuple[float, float, steady.Requests] | None:
        """The hold so far — its start, the time up to which every process has reported, and the requests: the rows
        of those that ended and what those still in flight streamed so far — or None when no level is held."""
        if self.hold_start is None:
            return None
        end, partial = self.in_flight()
        kept = self.rows
        starts, ends, e2e = (np.array([row[i] for row in kept], dtype=float) for i in (rows.START, rows.END, rows.E2E))
        ttft = np.array([np.nan if row[rows.TTFT] == "" else row[rows.TTFT] for row in kept], dtype=float)
        tokens = np.array(
            [row[rows.CHUNKS] if row[rows.COMPLETION] == "" else row[rows.COMPLETION] for row in kept], dtype=float
        )
        measured = np.array([row[rows.USERS] == self.users and rows.measured(row) for row in kept], dtype=bool)
        running = np.array(partial, dtype=float).reshape(-1, 4)  # start, first, chunks, report time
        return (
            self.hold_start,
            end,
            steady.Requests(
                start=np.concatenate([starts, running[:, 0]]),
                end=np.concatenate([ends, running[:, 3]]),
                first=np.concatenate([starts + np.nan_to_num(ttft), running[:, 1]]),
                tokens=np.concatenate([tokens, running[:, 2]]),
                measured=np.concatenate([measured, np.zeros(len(running), dtype=bool)]),
                e2e=np.concatenate([e2e, running[:, 3] - running[:, 0]]),
                ttft=np.concatenate([ttft, np.full(len(running), np.nan)]),
            ),
        )

    def in_flight(self) -> tuple[float, list[list[float]]]:
        """The time up to which every request is known (the oldest newest report of the live processes), and
        [start, first, chunks, report time] of those still in flight then."""
        missing = {
            client.id for client in getattr(self.runner, "clients", {}).values() if client.state == STATE_MISSING
        }
        live = {source: report for source, report in self.reports.items() if source not in missing}
        if not live:
            return time.time(), []
        end = min(report_time for report_time, _ in live.values())
        return end, [[*progress, report_time] for report_time, entries in live.values() for progress in entries]

    def _on_rows(self, environment: Environment, rows: list[list[Any]], **_kw: object) -> None:
        if environment is self.runner.environment and len(self.rows) < ROWS_LIMIT:
            self.rows += [row for row in rows if in_figures(row, self.canaries_counted)]

    def _on_in_flight(
        self, environment: Environment, source: str, report_time: float, entries: list[list[float]], **_kw: object
    ) -> None:
        if environment is self.runner.environment:
            self.reports[source] = (report_time, entries)

    def _on_scrape(self, environment: Environment, row: dict[str, Any], **_kw: object) -> None:
        if environment is self.runner.environment and not isinstance(row.get(WAITING, ""), str):
            self.scrapes.append({"time": row["time"], WAITING: float(row[WAITING])})
