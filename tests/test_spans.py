"""The server's view of each request: traceparent from X-Request-Id, the OTLP/HTTP span receiver (--otlp-port), the
simulator's span export and the analysis's join and TTFT split."""

from __future__ import annotations

import csv
import gzip
import io
import socket
import time
from types import SimpleNamespace

import pytest
from locust.event import Events

from benchmarks.harness import read_rows
from tests.helpers import SHORT
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.levels import level_stats, level_windows
from vllm_stress.client.exchange import new_request_id
from vllm_stress.core import schema
from vllm_stress.core.bound import level_bound
from vllm_stress.core.otlp import EMPTY_RESPONSE, TRACES_PATH, MalformedBody, export_body, request_spans, span_row
from vllm_stress.core.spans import trace_context, trace_id_of, traceparent
from vllm_stress.master import hooks, spanreceiver
from vllm_stress.master.spanreceiver import SpanReceiver
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.scenarios.run.servers import SPAN_EXPORT_ENV, span_args
from vllm_stress.simulator.api.requestlog import read_request_log


def test_the_trace_id_and_the_request_id_map_both_ways():
    request_id = new_request_id()
    trace_id = trace_id_of(request_id)
    prefix, pid, counter = request_id.split("-")
    assert trace_id == f"{prefix}{int(pid):08x}{int(counter):016x}" and trace_id_of(new_request_id()) != trace_id
    header = traceparent(request_id)
    assert header == f"00-{trace_id}-{header[36:52]}-01" and trace_context(header) == (
        bytes.fromhex(trace_id),
        bytes.fromhex(header[36:52]),
    )
    assert trace_id_of("chatcmpl-not-ours") == traceparent("chatcmpl-not-ours") == ""
    assert trace_context("00-" + "0" * 32 + "-00f067aa0ba902b7-01") is None  # an all-zero trace id is invalid
    assert trace_context("not a traceparent") is None


def span_body(*request_ids: str, queue: float = 0.25) -> bytes:
    attributes = {
        "gen_ai.latency.time_in_queue": queue,
        "gen_ai.latency.time_to_first_token": 0.5,
        "gen_ai.usage.prompt_tokens": 64,
        "gen_ai.request.id": "r",
    }
    spans = [(bytes.fromhex(trace_id_of(r)), b"\1" * 8, 10**18, 10**18 + 10**9, attributes) for r in request_ids]
    return export_body(spans, "test")


def test_a_span_body_decodes_to_its_rows_whatever_its_encoding():
    request_id = new_request_id()
    for body, encoding in ((span_body(request_id), ""), (gzip.compress(span_body(request_id)), "gzip")):
        (span,) = request_spans(body, encoding)
        row = dict(zip(schema.SERVER_SPAN_COLUMNS, span_row(span, 12.5), strict=True))
        assert row["trace_id"] == trace_id_of(request_id) and row["request_id"] == "r" and row["received"] == 12.5
        assert (row["queue_s"], row["ttft_s"], row["prompt_tokens"], row["e2e_s"]) == (0.25, 0.5, 64, "")
    for body, encoding in ((b"\xff\xff\xff", ""), (b"not gzip", "gzip")):
        with pytest.raises(MalformedBody):
            request_spans(body, encoding)


def receiver(tmp_path, updates: list) -> SpanReceiver:
    run = SimpleNamespace(folder=SimpleNamespace(path=str(tmp_path)), update=updates.append)
    return SpanReceiver(SimpleNamespace(events=Events()), SimpleNamespace(run=run), 4318)


def post(spans: SpanReceiver, body: bytes, content_type="application/x-protobuf", path=TRACES_PATH, method="POST"):
    answer = {}
    environ = {
        "PATH_INFO": path,
        "REQUEST_METHOD": method,
        "CONTENT_TYPE": content_type,
        "wsgi.input": io.BytesIO(body),
    }
    response = b"".join(spans.app(environ, lambda status, headers: answer.update(status=status)))
    return answer["status"], response


def test_the_receiver_keeps_the_runs_spans_and_counts_what_it_refuses(tmp_path, caplog):
    updates: list = []
    spans = receiver(tmp_path, updates)
    try:
        spans.environment.events.test_start.fire()
        ours, other = new_request_id(), new_request_id()
        row = dict.fromkeys(schema.REQUEST_COLUMNS, "") | {"ok": 1, "request_id": ours}
        hooks.rows_received.fire(environment=spans.environment, rows=[list(row.values())])
        assert post(spans, span_body(ours, other)) == ("200 OK", EMPTY_RESPONSE)
        assert post(spans, b"\xff\xff")[0] == "400 Bad Request"
        assert post(spans, b"{}", content_type="application/json")[0] == "415 Unsupported Media Type"
        assert post(spans, span_body(ours), path="/v1/metrics")[0] == "404 Not Found"
        assert post(spans, b"", method="GET")[0] == "405 Method Not Allowed"
        spans.environment.events.test_stop.fire()  # every successful row has its span: no wait
    finally:
        hooks.rows_received.remove_listener(spans._rows)
    with open(tmp_path / schema.SERVER_SPANS_FILE) as f:
        assert [r["trace_id"] for r in csv.DictReader(f)] == [trace_id_of(ours), trace_id_of(other)]
    assert updates == [{"span_receiver": {"port": 4318, "spans": 2, "rejected": 2}}]
    assert "2 malformed OTLP bodies rejected" in caplog.text


def test_a_server_that_sends_no_span_gets_one_warning(tmp_path, caplog, monkeypatch):
    """The stop waits for the spans of the run's rows even when none came yet (a run shorter than the server's
    export batch, 5 s by default, has all its spans still to come), then warns once."""
    monkeypatch.setattr(spanreceiver, "SPAN_WAIT_S", 0.5)
    updates: list = []
    spans = receiver(tmp_path, updates)
    try:
        spans.environment.events.test_start.fire()
        row = dict.fromkeys(schema.REQUEST_COLUMNS, "") | {"ok": 1, "request_id": new_request_id()}
        hooks.rows_received.fire(environment=spans.environment, rows=[list(row.values())])
        started = time.monotonic()
        spans.environment.events.test_stop.fire()
        assert time.monotonic() - started >= 0.5
    finally:
        hooks.rows_received.remove_listener(spans._rows)
    assert updates == [{"span_receiver": {"port": 4318, "spans": 0, "rejected": 0}}]
    assert [r.levelname for r in caplog.records if "no request span came" in r.message] == ["WARNING"]


def test_a_taken_port_is_refused(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        spans = receiver(tmp_path, [])
        spans.port = taken.getsockname()[1]
        with pytest.raises(OSError):
            spans.serve("127.0.0.1")


def test_the_bound_reads_the_split_when_there_is_one():
    level = {"users": 8, "server_in_system_mean": 8.0, "server_waiting_mean": 0.0, "ttft_p50_s": 1.0}
    assert level_bound(level | {"ttft_queue_p50_s": 0.96}) == "server-bound: 96 % of TTFT waiting in the scheduler"
    assert level_bound(level | {"ttft_queue_p50_s": 0.2}) == ""
    assert level_bound(level | {"server_waiting_mean": 4.0}) == "server-bound: waiting requests"
    gateway = level | {"server_http_held_mean": 2.0, "ttft_queue_p50_s": 0.0, "ttft_before_server_p50_s": 0.9}
    assert level_bound(gateway) == "client/gateway-bound (vLLM's HTTP layer held 2 of 8; 90 % of TTFT before vLLM)"


def test_a_queueing_levels_spans_join_every_row_with_the_simulators_own_queue_time(run_locust, simulator, tmp_path):
    """Six users on a simulator that runs two sequences at a time: most requests wait in its queue. Every successful
    row is joined to its span, whose queue time is the one the simulator logged for the request; the client's TTFT
    holds the server's queue and prefill, and a little more (loopback, HTTP, the hand-off of the step's tokens)."""
    port, log = free_port(), tmp_path / "requests.jsonl"
    endpoint = f"http://127.0.0.1:{port}{TRACES_PATH}"
    sim = simulator(
        "--profile", "cpu-tiny", "--max-num-seqs", "2", "--request-log", str(log), "--otlp-traces-endpoint", endpoint
    )
    out = tmp_path / "run"
    args = ["-f", "locustfiles/chat.py", "-H", sim.url, "-u", "6", "-r", "6", "-t", "4s", "--otlp-port", str(port)]
    proc = run_locust(*args, *SHORT, "--results-dir", str(out), timeout=90)
    assert proc.returncode == 0, proc.stderr[-2000:]
    sim.stop()  # flushes the request log
    queue_times = {record_id: record["queue"] for record_id, record in read_request_log(str(log)).items()}
    rows = [row for row in read_rows(out / "requests.csv") if row["ok"] == "1"]
    run = load_run(out)
    joined = run.requests[run.requests["ok"]]
    assert len(rows) >= 12 and len(joined) == len(rows) and joined["server_queue_s"].notna().all()
    assert run.unjoined_spans == 0
    for row in joined.itertuples():
        assert row.server_queue_s == pytest.approx(queue_times[row.request_id], abs=1e-3)
        assert row.ttft_s > row.server_queue_s + row.server_prefill_s
    # what TTFT holds beyond the server's queue and prefill (before_server_s): the median row's is a little (a client
    # descheduled on a loaded machine stamps one row's send or first token late, not the median's)
    assert 0 < joined["before_server_s"].median() < 0.25
    assert joined["server_queue_s"].max() > joined["server_prefill_s"].max()  # it did queue
    windows, _partial = level_windows(run)
    (level,) = level_stats(run, windows).to_dict("records")
    assert level["server_view_requests"] > 0 and level["ttft_queue_p50_s"] > level["ttft_prefill_p50_s"]


def test_the_runner_points_the_servers_it_starts_at_the_receiver():
    endpoint = ["--otlp-traces-endpoint", "http://127.0.0.1:4318/v1/traces"]
    assert span_args({}, ["--otlp-port=4318"], None) == endpoint  # the simulator
    assert span_args({"otlp-port": "4318"}, [], "http://127.0.0.1:8000") == endpoint  # a --server-cmd on this machine
    assert span_args({"otlp-port": "4318"}, ["--otlp-port", "0"], None) == []  # the command line beats the config
    assert span_args({}, ["--otlp-port=4318"], "http://gpu-host:8000") == []  # a remote server is told by its owner
    assert SPAN_EXPORT_ENV["OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"] == "http/protobuf"
