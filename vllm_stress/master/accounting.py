"""Every request started, accounted for: rows by outcome and by worker, workers lost, requests without a row."""

from __future__ import annotations

from collections import Counter
from typing import Any

from vllm_stress.master import rows


class RequestAccounting:
    """The counts of one run (``reset`` at its start) and the ``run.json`` keys they fill (``run_keys``)."""

    def __init__(self) -> None:
        # requests (successes and failures), failures, aborted, cancelled, mismatches, canaries and primers (of the
        # requests: the correctness canaries' and the session primers'), engine_requests (rows.engine_requests)
        self.totals: Counter[str] = Counter()
        self.rows_by_worker: Counter[str] = Counter()  # rows received from each worker, in the order they came
        self.lost_workers: list[dict[str, Any]] = []  # {"worker", "last_seen"} of each worker lost
        self.server_requests: int | None = None  # requests the server finished in the run, by its own counter

    def reset(self) -> None:
        self.totals.clear()
        self.rows_by_worker.clear()
        self.lost_workers = []
        self.server_requests = None

    def count(self, new_rows: list[list[Any]], worker: str | None = None) -> None:
        """Count rows; ``worker``: the worker that sent them (the master)."""
        for row in new_rows:
            apart = rows.apart(row)
            self.totals["aborted"] += rows.aborted(row)
            self.totals["cancelled"] += rows.cancelled(row)
            self.totals["requests"] += not apart
            self.totals["canaries"] += bool(row[rows.CANARY]) and not apart  # of the requests
            self.totals["primers"] += rows.primer(row) and not apart  # of the requests
            self.totals["failures"] += not (apart or row[rows.OK])
            self.totals["mismatches"] += row[rows.MISMATCH]
            self.totals["engine_requests"] += rows.engine_requests(row)  # as the server's counter counts them
        if worker is not None:
            self.rows_by_worker[worker] += len(new_rows)

    def lose_worker(self, worker: str, last_seen: float | None) -> None:
        """A worker went missing: its requests in flight, and its rows since its last report, have no row (unless its
        link comes back and they still arrive: run_keys counts its rows when it is asked)."""
        self.lost_workers.append({"worker": worker, "last_seen": last_seen})

    def unaccounted(self) -> int | None:
        """Requests the server finished that have no row (None without the server's count), at least: vLLM 0.32 counts
        no client abort, but a stream cut while its last chunk was on its way was finished first, so the rows kept
        include the aborted and cancelled ones (and each input of a pooling request): a cut stream is never taken
        for a lost one."""
        if self.server_requests is None:
            return None
        return max(0, self.server_requests - self.totals["engine_requests"])

    def run_keys(self) -> dict[str, Any]:
        """The run.json keys these counts fill."""
        return {
            "workers": list(self.rows_by_worker),
            "lost_workers": [{**lost, "rows": self.rows_by_worker[lost["worker"]]} for lost in self.lost_workers],
            "server_requests": self.server_requests,
            "unaccounted_requests": self.unaccounted(),
        }
