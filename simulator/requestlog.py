"""The simulator's own per-request timing record, for checking a client's latencies against the server's.

With ``--request-log PATH``, every generation request that carries an ``X-Request-Id`` header (the header vLLM takes
as its request id and echoes with ``--enable-request-id-headers``) adds one JSON line to ``PATH``:

``{"id": ..., "arrival": ..., "first": ..., "last": ..., "end": ..., "chunks": ...}``

* ``arrival``: when the request reached its handler (headers parsed, before the body is read);
* ``first``: right before the write that carries the first output token's bytes hands them to the socket;
* ``last``: the same for the last output token (the write that carries the finish reason);
* ``end``: when the handler returned;
* ``chunks``: writes that carried output tokens (the server-side count of a client's ITL gaps + 1 when each write
  holds one token).

Times are unix seconds (``time.time()``) of the simulator's clock. A client compares durations (its TTFT with
``first - arrival``), so the two clocks need not agree. Requests without the header are not logged.
"""

from __future__ import annotations

import json
import time

REQUEST_ID_HEADER = "X-Request-Id"


class RequestTiming:
    """The server-side timestamps of one request (see the module docstring)."""

    __slots__ = ("request_id", "arrival", "first", "last", "chunks")

    def __init__(self, request_id: str) -> None:
        self.request_id = request_id
        self.arrival = time.time()
        self.first: float | None = None
        self.last: float | None = None
        self.chunks = 0

    def output_write(self) -> None:
        """A write carrying output tokens is about to hand its bytes to the socket."""
        now = time.time()
        if self.first is None:
            self.first = now
        self.last = now
        self.chunks += 1


class RequestLog:
    """One JSON line per logged request, buffered; ``close()`` flushes it."""

    def __init__(self, path: str) -> None:
        self._file = open(path, "a", encoding="utf-8", buffering=1 << 16)  # noqa: SIM115 (closed by close())

    def timing(self, headers) -> RequestTiming | None:
        request_id = headers.get(REQUEST_ID_HEADER)
        return RequestTiming(request_id) if request_id else None

    def write(self, timing: RequestTiming) -> None:
        record = {"id": timing.request_id, "arrival": timing.arrival, "first": timing.first, "last": timing.last,
                  "end": time.time(), "chunks": timing.chunks}  # fmt: skip
        self._file.write(json.dumps(record) + "\n")

    def close(self) -> None:
        self._file.close()


def read_request_log(path: str) -> dict[str, dict]:
    """The records of a request log, by request id."""
    with open(path, encoding="utf-8") as f:
        return {record["id"]: record for record in map(json.loads, f)}
