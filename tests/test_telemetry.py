"""Server telemetry (server_metrics.csv) and client health (client_health.csv) in real runs."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

from benchmarks.harness import read_rows
from tests.helpers import served_as_rows, server_completed
from vllm_stress.client.stream import KERNEL_ENABLED
from vllm_stress.core import schema


def test_client_cpu_limit_is_locusts():
    code = "from locust.runners import CPU_WARNING_THRESHOLD; print(CPU_WARNING_THRESHOLD)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True).stdout
    assert int(out) == schema.CLIENT_CPU_LIMIT_PERCENT


def test_a_run_writes_plausible_server_metrics(run_locust, simulator, tmp_path):
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / "run"
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "-u",
        "6",
        "-r",
        "6",
        "-t",
        "5s",
        "--input-tokens",
        "64",
        "--output-tokens",
        "16",
        "--server-metrics-interval",
        "0.5",
        "--headless",
        "--only-summary",
        "-L",
        "WARNING",
        "--results-dir",
        str(out),
    )
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "WARNING" not in proc.stderr
    requests_rows = read_rows(out / schema.REQUESTS_FILE)
    answered = [r for r in requests_rows if r["ttft_s"]]
    scrapes = read_rows(out / schema.SERVER_METRICS_FILE)
    assert len(scrapes) >= 5  # the baseline, every 0.5 s while the users run, the last one at the stop
    assert {s["users"] for s in scrapes} == {"6"}
    assert max(int(s["running"]) for s in scrapes) > 0
    generated = [int(s["generation_tokens"]) for s in scrapes]
    streamed = sum(int(r["chunks"]) for r in requests_rows)  # every chunk the clients got carried at least a token
    assert generated == sorted(generated) and generated[-1] - generated[0] >= streamed > 0
    ttft_counts = sum(int(s["ttft_count"]) for s in scrapes[1:])
    assert len(answered) <= ttft_counts <= len(requests_rows)  # the aborted ones may have had a first token
    finished = int(scrapes[-1]["request_success"]) - int(scrapes[0]["request_success"])
    # the last scrape is taken at the stop: the server may count the streams cut by it (aborts) a step later
    assert len([r for r in requests_rows if r["ok"] == "1"]) <= finished <= len(requests_rows)
    assert served_as_rows(server_completed(sim.url), requests_rows)
    busy = [s for s in scrapes[1:] if int(s["ttft_count"])]
    assert all(0 < float(s["ttft_p50_s"]) <= float(s["ttft_p99_s"]) for s in busy)
    health = read_rows(out / schema.CLIENT_HEALTH_FILE)
    cores = os.cpu_count() or 1
    assert health and all(h["worker"] == "local" and 0 <= float(h["cpu_percent"]) <= 100 * cores for h in health)
    # the CPU the rows add up to is at most what the kernel charged the Locust process for its whole life (its
    # first row's span is counted from its first request, later than the test start the meter counts from)
    times = [min(float(r["start_time"]) for r in requests_rows)] + [float(h["time"]) for h in health]
    spans = zip(health, times, times[1:], strict=False)
    measured_s = sum(float(h["cpu_percent"]) / 100 * (end - begin) for h, begin, end in spans)
    charged_s = sum(getattr(after, f) - getattr(before, f) for f in ("ru_utime", "ru_stime"))
    assert 0 < measured_s <= charged_s, (measured_s, charged_s)
    if KERNEL_ENABLED:  # kernel-timed reads: how late the process read them, p99 per row
        read_behind_ms = [float(h["read_behind_p99_ms"]) for h in health if h["read_behind_p99_ms"]]
        assert read_behind_ms and all(0 < ms < 5000 for ms in read_behind_ms)  # after arrival, within the 5 s run


def test_scraping_can_be_turned_off(run_locust, simulator, tmp_path):
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "3s",
        "--input-tokens",
        "64",
        "--output-tokens",
        "16",
        "--server-metrics-interval",
        "0",
        "--headless",
        "--only-summary",
        "-L",
        "WARNING",
        "--results-dir",
        str(out),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (out / schema.REQUESTS_FILE).exists() and not (out / schema.SERVER_METRICS_FILE).exists()
