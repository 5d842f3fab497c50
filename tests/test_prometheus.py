"""The load generator's own Prometheus series (vllm_stress.master.promexport): rows in, exposition text out; and a real
Prometheus (Debian's package) scraping a master, its workers and the simulator through a ramp, read back through its
HTTP API with the queries of the shipped Grafana dashboard."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import time
from collections import Counter
from dataclasses import dataclass
from types import SimpleNamespace

import pandas as pd
import pytest
import requests
import yaml
from locust.event import Events
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import (
    NOWHERE,
    REPO,
    SLOW_SIM,
    refused,
    run_json,
    start_master_and_workers,
    wait_until,
)
from vllm_stress.core import schema
from vllm_stress.master import hooks
from vllm_stress.master.accounting import RequestAccounting
from vllm_stress.master.promexport import LATENCY_BUCKETS_S, MAX_ERROR_CLASSES, PromExport, RunSeries
from vllm_stress.scenarios.run.runner import free_port

RUN = {"scenario": "demo", "run": "run-1"}


def row(ttft=0.012, e2e=0.5, tokens=8, error="", mismatch=0, finish="length", name="chat"):
    """A requests.csv row as the master receives it (a list)."""
    values = dict.fromkeys(schema.REQUEST_COLUMNS, "")
    values |= {
        "start_time": 100.0,
        "end_time": 100.0 + e2e,
        "ttft_s": ttft,
        "tpot_s": "" if tokens <= 1 else (e2e - ttft) / (tokens - 1),
        "e2e_s": e2e,
        "prompt_tokens": 16,
        "completion_tokens": tokens,
        "count_mismatch": mismatch,
        "ok": int(not error),
        "error": error,
        "finish_reason": finish,
        "users": 4,
        "name": name,
    }
    return [values[column] for column in schema.REQUEST_COLUMNS]


def exporter(folder="/results/run-1"):
    """A PromExport over a fake master: a run folder open (or None), level 4, ITL counts, two workers' health."""
    environment = SimpleNamespace(events=Events())
    recorder = SimpleNamespace(
        run=SimpleNamespace(
            folder=folder and SimpleNamespace(path=folder), last_folder="/results/run-1", meta={"scenario": "demo"}
        ),
        accounting=RequestAccounting(),
        runner=SimpleNamespace(target_user_count=4),
        level=4,
        itl={2: Counter({1.0: 3}), 4: Counter({12.3: 1})},
    )
    health = SimpleNamespace(latest_cpu={"w1": 50.0, "w2": 20.0}, latest_lag_ms={"w1": 2.0, "w2": 1.0})
    return environment, PromExport(environment, recorder, health)


def samples(export: PromExport) -> dict[tuple[str, frozenset], float]:
    """The exposition, parsed back: {(sample name, its labels but the run's): value}."""
    text = export.exposition().decode()
    parsed = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            assert {key: sample.labels[key] for key in RUN} == RUN, sample
            labels = frozenset((k, v) for k, v in sample.labels.items() if k not in RUN)
            parsed[sample.name, labels] = sample.value
    return parsed


def labels(**values: str) -> frozenset:
    return frozenset(values.items())


def test_rows_become_merged_series_by_outcome_with_llm_latency_buckets():
    environment, export = exporter()
    rows = [row(), row(ttft=0.1), row(mismatch=1), row(finish="abort"), row(error="HTTP 503", tokens=0)]
    rows += [row(error=schema.ABORTED, tokens=3), row(ttft=2.5, name="completions")]
    hooks.rows_received.fire(environment=environment, rows=rows[:4])
    hooks.rows_received.fire(environment=environment, rows=rows[4:])  # another worker's report: merged
    got = samples(export)
    chat = {"user_class": "chat"}
    outcomes = {
        outcome: got["vllm_stress_requests_total", labels(**chat, outcome=outcome, error=error)]
        for outcome, error in (("success", ""), ("off_target", ""), ("failure", "HTTP 503"), ("aborted", ""))
    }
    assert outcomes == {"success": 2, "off_target": 2, "failure": 1, "aborted": 1}
    assert got["vllm_stress_generation_tokens_total", labels(**chat)] == 8 * 4 + 3
    assert got["vllm_stress_prompt_tokens_total", labels(user_class="completions")] == 16
    # only measured requests in the latencies: 12 ms and 100 ms, in the buckets whose upper bound holds them
    ttft = "vllm_stress_time_to_first_token_seconds"
    assert got[f"{ttft}_count", labels(**chat)] == 2
    assert got[f"{ttft}_sum", labels(**chat)] == 0.112
    assert got[f"{ttft}_bucket", labels(**chat, le="0.01")] == 0
    assert got[f"{ttft}_bucket", labels(**chat, le="0.015")] == 1
    assert got[f"{ttft}_bucket", labels(**chat, le="0.1")] == 2  # le is "less or equal"
    assert got[f"{ttft}_bucket", labels(user_class="completions", le="3.0")] == 1
    assert (LATENCY_BUCKETS_S[0], LATENCY_BUCKETS_S[-1]) == (0.001, 750.0)  # milliseconds to minutes
    assert got["vllm_stress_inter_token_latency_seconds_count", labels()] == 4  # every level's ITL counts, merged


@pytest.mark.parametrize("counted", [False, True])
def test_canaries_are_a_user_class_of_their_own_unless_counted_in(counted):
    environment, export = exporter()
    export.series = RunSeries(canaries_counted=counted)
    canary = row(tokens=2)
    canary[schema.REQUEST_COLUMNS.index("canary")] = "syn-mc-001"
    hooks.rows_received.fire(environment=environment, rows=[row(), canary])
    got = samples(export)
    apart = labels(user_class="chat canary", outcome="success", error="")
    assert got["vllm_stress_requests_total", labels(user_class="chat", outcome="success", error="")] == 1 + counted
    assert got.get(("vllm_stress_requests_total", apart)) == (None if counted else 1)


def test_live_figures_are_read_at_each_scrape():
    environment, export = exporter()
    hooks.phase_changed.fire(
        environment=environment, text="Level 1/2 (4 users): holding 4 s", limit_s=4.0, phase="holding"
    )
    hooks.level_ended.fire(
        environment=environment, users=4, verdict=SimpleNamespace(steady=False), output_tokens_per_s=1.0
    )
    hooks.in_flight_reported.fire(environment=environment, source="w1", report_time=1.0, entries=[[0, 0, 1]] * 3)
    hooks.in_flight_reported.fire(environment=environment, source="w2", report_time=1.0, entries=[[0, 0, 1]] * 5)
    export.recorder.accounting.lose_worker("w2", None)
    export.recorder.accounting.server_requests = 7
    got = samples(export)
    assert got["vllm_stress_level_phase", labels(phase="holding")] == 1
    assert got["vllm_stress_level_phase", labels(phase="ramping")] == 0
    assert got["vllm_stress_level_steady", labels(level="4")] == 0
    assert got["vllm_stress_level_users", labels()] == got["vllm_stress_target_users", labels()] == 4
    assert got["vllm_stress_requests_in_flight", labels()] == 3  # the lost worker's are gone with it
    assert got["vllm_stress_lost_workers", labels()] == 1
    assert got["vllm_stress_unaccounted_requests", labels()] == 7
    assert got["vllm_stress_client_cpu_percent", labels(process="w1")] == 50
    assert got["vllm_stress_client_loop_lag_seconds", labels(process="w2")] == 0.001


def test_failure_classes_are_bounded_and_a_new_run_starts_afresh():
    environment, export = exporter()
    errors = [f"HTTP {500 + i}" for i in range(MAX_ERROR_CLASSES + 5)]
    hooks.rows_received.fire(environment=environment, rows=[row(error=error, tokens=0) for error in errors])
    hooks.rows_received.fire(environment=SimpleNamespace(), rows=[row()])  # another environment's: ignored
    got = samples(export)
    failures = {dict(key)["error"]: value for (name, key), value in got.items() if name == "vllm_stress_requests_total"}
    assert len(failures) == MAX_ERROR_CLASSES + 1 and failures["other"] == 5
    environment.events.test_start.fire(environment=environment)
    assert not any(name == "vllm_stress_requests_total" for name, _ in samples(export))


def test_rows_outside_an_open_run_folder_are_not_counted_as_requests_csv_does_not_get_them():
    environment, export = exporter(folder=None)
    hooks.rows_received.fire(environment=environment, rows=[row()])
    assert not any(name == "vllm_stress_requests_total" for name, _ in samples(export))
    assert math.isfinite(samples(export)["vllm_stress_lost_workers", labels()])


# --- a real Prometheus ------------------------------------------------------------------------------------------------

PROMETHEUS = os.environ.get("PROMETHEUS", "/usr/bin/prometheus")  # the Makefile's
DASHBOARD = REPO / "deploy" / "grafana" / "vllm-stress.json"
SCRAPE_S = 1.0
SCRAPE_SLACK_S = 0.1  # a sample is stamped when its scrape starts, a moment before the master answers it
RATE_INTERVAL = "5s"  # Grafana's $__rate_interval at a 1 s scrape interval


@dataclass
class Prometheus:
    """A Prometheus server started by the test: its base URL; ``query`` and ``query_range`` return its results."""

    url: str

    def api(self, path: str, **params: object) -> list[dict]:
        answer = requests.get(f"{self.url}/api/v1/{path}", params=params, timeout=10).json()
        assert answer["status"] == "success", answer
        return answer["data"]["result"]

    def query(self, expr: str, at: float) -> list[dict]:
        return self.api("query", query=expr, time=at)

    def query_range(self, expr: str, start: float, end: float) -> list[dict]:
        return self.api("query_range", query=expr, start=start, end=end, step=SCRAPE_S)


@pytest.fixture
def prometheus(processes, tmp_path):
    """``prometheus(*targets)``: Debian's Prometheus on a loopback port scraping ``host:port`` targets every second,
    its storage in tmp_path; skips without it."""
    if not os.path.exists(PROMETHEUS):
        pytest.skip(f"{PROMETHEUS} is missing: make prometheus")

    def start(*targets: str) -> Prometheus:
        config = tmp_path / "prometheus.yml"
        jobs = [{"job_name": f"target{i}", "static_configs": [{"targets": [t]}]} for i, t in enumerate(targets)]
        global_ = {"scrape_interval": f"{SCRAPE_S:g}s", "evaluation_interval": f"{SCRAPE_S:g}s"}
        config.write_text(yaml.safe_dump({"global": global_, "scrape_configs": jobs}))
        address = f"127.0.0.1:{free_port()}"
        command = [PROMETHEUS, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}"]
        processes([*command, f"--web.listen-address={address}"], tmp_path / "prometheus.log")
        server = Prometheus(f"http://{address}")
        log = tmp_path / "prometheus.log"
        assert wait_until(lambda: ready(server.url), timeout=30), log.read_text()[-2000:]
        # every target tried once (up is 0 while one does not answer): a target's first scrape can otherwise come
        # seconds later, when Prometheus applies its discovered targets
        assert wait_until(lambda: len(server.query("up", time.time())) == len(targets), timeout=30)
        return server

    return start


def ready(url: str) -> bool:
    try:
        return requests.get(f"{url}/-/ready", timeout=1).status_code == 200
    except requests.ConnectionError:
        return False


def host_port(url: str) -> str:
    return url.removeprefix("http://").rstrip("/")


def dashboard_queries(substitutions: dict[str, str]) -> list[str]:
    """Every PromQL expression of the shipped dashboard (panels and annotations), its variables substituted."""
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [target["expr"] for panel in dashboard["panels"] for target in panel.get("targets", [])]
    exprs += [annotation["expr"] for annotation in dashboard["annotations"]["list"]]
    for variable, value in substitutions.items():
        exprs = [expr.replace(variable, value) for expr in exprs]
    assert not [expr for expr in exprs if "$" in expr]
    return exprs


def scraped_since(server: Prometheus, moment: float) -> bool:
    """Whether Prometheus has scraped every target at or after ``moment`` (unix seconds)."""
    scrapes = server.query("timestamp(up)", time.time())
    return bool(scrapes) and min(float(scrape["value"][1]) for scrape in scrapes) >= moment


def raw_samples(server: Prometheus, selector: str, at: float) -> list[tuple[float, float]]:
    """The samples of the one series a range ``selector`` names, with the times they were scraped."""
    (series,) = server.query(selector, at)
    return [(float(t), float(v)) for t, v in series["values"]]


def changes(samples: list[tuple[float, float]], to: float) -> list[float]:
    """When the series took the value ``to`` (its first sample with it after one without)."""
    return [t for (t, v), (_, before) in zip(samples[1:], samples, strict=False) if v == to and before != to]


def test_prometheus_scrapes_a_ramp_and_the_dashboard_queries_all_answer(simulator, prometheus, processes, tmp_path):
    sim = simulator(*SLOW_SIM)
    web = f"127.0.0.1:{free_port()}"
    server = prometheus(web, host_port(sim.url))
    ramp = ["--levels", "2,4", "--step-time", "4", "--warmup", "1", "--ramp-time", "0.5", "--arrival-rate", "6"]
    web_ui = ["--web-host", "127.0.0.1", "--web-port", web.rsplit(":", 1)[1]]
    out, master, _, _ = start_master_and_workers(
        processes, tmp_path, "locustfiles/chat.py,scenarios/shape.py", sim.url, 2, *ramp, *web_ui, headless=False
    )
    assert wait_until(lambda: (out / "run.json").is_file() and run_json(out)["ended"], timeout=90)
    started, ended = run_json(out)["started"], run_json(out)["ended"] + 2 * SCRAPE_S
    assert wait_until(lambda: scraped_since(server, ended), timeout=30)  # the last figures scraped
    run = {"$run": out.name, "$model_name": sim.model, "$__rate_interval": RATE_INTERVAL}
    silent = [expr for expr in dashboard_queries(run) if not server.query_range(expr, started, ended)]
    assert not silent, silent

    # the output tokens counted equal the rows' (the counter's last value: increase() extrapolates)
    rows = pd.read_csv(out / schema.REQUESTS_FILE)
    (tokens,) = server.query(f'sum(vllm_stress_generation_tokens_total{{run="{out.name}"}})', ended)
    assert float(tokens["value"][1]) == rows["completion_tokens"].sum() > 0

    # each level's phases change at the times of levels.csv, within a scrape
    levels = pd.read_csv(out / schema.LEVELS_FILE)
    assert list(levels["users"]) == [2, 4]
    span = f"{ended - started + 10:.0f}s"
    holding = raw_samples(server, f'vllm_stress_level_phase{{phase="holding", run="{out.name}"}}[{span}]', ended)
    starts, ends = changes(holding, to=1), changes(holding, to=0)
    assert len(starts) == len(ends) == 2, holding
    for got, expected in [*zip(starts, levels["hold_start"], strict=True), *zip(ends, levels["hold_end"], strict=True)]:
        assert expected - SCRAPE_SLACK_S <= got <= expected + SCRAPE_S, (got, expected)
    level = raw_samples(server, f'vllm_stress_level_users{{run="{out.name}"}}[{span}]', ended)
    ramp_start = levels["ramp_start"][1]
    assert ramp_start - SCRAPE_SLACK_S <= changes(level, to=4)[0] <= ramp_start + SCRAPE_S

    # every measured request's TTFT is in the exported histogram: its buckets are the rows' own (a hold's window is
    # not compared: rows reach the master up to 3 s late, so the window Prometheus sees a hold in is shifted onto the
    # next level's ramp; nor is a quantile: histogram_quantile's rule differs from the rows' on a few dozen rows)
    measured = rows[(rows["ok"] == 1) & (rows["count_mismatch"] == 0) & (rows["finish_reason"] != "abort")]
    ttft = f'sum by (le) (vllm_stress_time_to_first_token_seconds_bucket{{run="{out.name}"}})'
    exported = {float(bucket["metric"]["le"]): float(bucket["value"][1]) for bucket in server.query(ttft, ended)}
    assert exported == {le: (measured["ttft_s"] <= le).sum() for le in exported} and exported[math.inf] > 0


def test_a_killed_worker_shows_in_the_lost_workers_series_within_a_scrape(simulator, prometheus, processes, tmp_path):
    sim = simulator(*SLOW_SIM)
    port = free_port()
    server = prometheus(f"127.0.0.1:{port}")
    out, master, (first, _), _ = start_master_and_workers(
        processes,
        tmp_path,
        "locustfiles/chat.py",
        sim.url,
        2,
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "60s",
        "--metrics-port",
        str(port),
    )
    reporting = f'vllm_stress_client_cpu_percent{{run="{out.name}", process!="master"}}'
    assert wait_until(lambda: len(server.query(reporting, time.time())) == 2, timeout=30)  # both workers report
    first.kill()
    assert wait_until(lambda: run_json(out)["lost_workers"], timeout=30, interval=0.05)  # Locust's heartbeat liveness
    named = time.time()
    assert wait_until(lambda: scraped_since(server, named + SCRAPE_S), timeout=30)
    lost = raw_samples(server, f'vllm_stress_lost_workers{{run="{out.name}"}}[60s]', time.time())
    assert changes(lost, to=1)[0] <= named + SCRAPE_S, lost
    master.send_signal(signal.SIGTERM)
    assert master.wait(timeout=30) == 0  # the lost worker is no failure, nor are the requests aborted at the stop


def test_a_metrics_port_taken_is_refused_in_one_line(run_locust):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = run_locust("-f", "locustfiles/chat.py", "-H", NOWHERE, "--headless", "--metrics-port", str(port))
    refused(proc, f"--metrics-port {port}: Address already in use")
