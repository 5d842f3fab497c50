"""An OTLP/HTTP receiver for the server's request spans (``--otlp-port``): the master (or the local runner) writes
each run's spans to ``server_spans.csv`` and, at the run's stop, waits for the spans of its last requests; the
analysis joins them to the rows by trace id (docs/concepts/traces.md)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import gevent
from gevent.pywsgi import WSGIServer

from vllm_stress.core import schema
from vllm_stress.core.otlp import EMPTY_RESPONSE, PROTOBUF, TRACES_PATH, Cell, MalformedBody, request_spans, span_row
from vllm_stress.core.spans import trace_id_of
from vllm_stress.master import hooks
from vllm_stress.master.csvappender import CsvAppender

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.master.runrecorder import LocalRecorder

log = logging.getLogger(__name__)

# at the run's stop, how long to wait for the spans of its last successful requests: vLLM's span exporter sends
# a batch every 5 s (OpenTelemetry's BatchSpanProcessor default; OTEL_BSP_SCHEDULE_DELAY shortens it)
SPAN_WAIT_S = 6.0
SPAN_POLL_S = 0.1
_OK = schema.REQUEST_COLUMNS.index("ok")
_REQUEST_ID = schema.REQUEST_COLUMNS.index("request_id")
StartResponse = Callable[[str, list[tuple[str, str]]], Any]


class SpanReceiver:
    """The run's spans into its folder; ``spans``/``rejected``: what this run received and refused."""

    def __init__(self, environment: Environment, recorder: LocalRecorder, port: int) -> None:
        self.environment = environment
        self.recorder = recorder
        self.port = port
        self.file: CsvAppender | None = None
        self.spans = self.rejected = 0
        self.expected: set[str] = set()  # trace ids of the run's successful rows
        self.seen: set[str] = set()  # trace ids of the run's spans
        environment.events.test_start.add_listener(self._start)  # after the recorder's: the run folder is open
        environment.events.test_stop.add_listener(self._stop)  # after the recorder's: every row is in
        hooks.rows_received.add_listener(self._rows)

    def serve(self, host: str) -> WSGIServer:
        """Listen on ``host``:port in the background; raises OSError when the port cannot be bound."""
        server = WSGIServer((host, self.port), self.app, log=None)
        server.start()
        return server

    def app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        """OTLP/HTTP: POST /v1/traces with a protobuf ExportTraceServiceRequest; 200 with an empty response."""
        if environ.get("PATH_INFO") != TRACES_PATH:
            return _answer(start_response, "404 Not Found", b"OTLP traces go to " + TRACES_PATH.encode())
        if environ.get("REQUEST_METHOD") != "POST":
            return _answer(start_response, "405 Method Not Allowed", b"POST only")
        if environ.get("CONTENT_TYPE", "").split(";")[0].strip() != PROTOBUF:
            self.rejected += 1
            return _answer(start_response, "415 Unsupported Media Type", b"OTLP/HTTP protobuf only")
        body = environ["wsgi.input"].read()
        try:
            spans = request_spans(body, environ.get("HTTP_CONTENT_ENCODING", ""))
        except MalformedBody as exc:
            self.rejected += 1
            log.debug("Malformed OTLP body (%d bytes): %s", len(body), exc)
            return _answer(start_response, "400 Bad Request", b"not an OTLP ExportTraceServiceRequest")
        self._keep([span_row(span, time.time()) for span in spans])
        return _answer(start_response, "200 OK", EMPTY_RESPONSE, PROTOBUF)

    def _keep(self, rows: list[list[Cell]]) -> None:
        if self.file is None or not rows:
            return
        self.spans += len(rows)
        self.seen.update(str(row[1]) for row in rows)
        self.file.write_rows(rows)

    def _rows(self, rows: list[list[Any]], **_kw: object) -> None:
        if self.file is not None:
            self.expected.update(trace_id_of(str(row[_REQUEST_ID])) for row in rows if str(row[_OK]) == "1")

    def _start(self, **_kw: object) -> None:
        folder = self.recorder.run.folder
        self.spans = self.rejected = 0
        self.expected.clear()
        self.seen.clear()
        if folder is not None:
            self.file = CsvAppender(folder.path, schema.SERVER_SPANS_FILE, schema.SERVER_SPAN_COLUMNS)

    def _stop(self, **_kw: object) -> None:
        if self.file is None:
            return
        deadline = time.monotonic() + SPAN_WAIT_S  # also when none came yet: a run shorter than the exporter's batch
        while self.expected - self.seen and time.monotonic() < deadline:
            gevent.sleep(SPAN_POLL_S)
        self.file.close()
        self.file = None
        self.recorder.run.update({"span_receiver": {"port": self.port, "spans": self.spans, "rejected": self.rejected}})
        if not self.spans and self.expected:
            log.warning(
                "--otlp-port %d: no request span came from the server during the run (is it started with "
                "--otlp-traces-endpoint http://THIS_HOST:%d%s and OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf?): "
                "the rows have no server view",
                self.port,
                self.port,
                TRACES_PATH,
            )
        elif self.rejected:
            log.warning("--otlp-port %d: %d malformed OTLP bodies rejected", self.port, self.rejected)


def _answer(start_response: StartResponse, status: str, body: bytes, content_type: str = "text/plain") -> list[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body)))])
    return [body]
