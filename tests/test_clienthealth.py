"""client_health.csv: the master's own CPU and each worker's, from their reports, and the highest CPU per level."""

from __future__ import annotations

import csv
import math
from types import SimpleNamespace

from vllm_stress.core import schema
from vllm_stress.master import cpumeter
from vllm_stress.master.clienthealth import CPU_REPORT_KEY, ClientHealth, report_worker_cpu


class Hook:
    def __init__(self) -> None:
        self.listeners: list = []

    def add_listener(self, listener) -> None:
        self.listeners.append(listener)


def events() -> SimpleNamespace:
    return SimpleNamespace(test_start=Hook(), test_stop=Hook(), worker_report=Hook(), report_to_master=Hook())


def test_worker_reports_and_own_readings_are_written_per_level(tmp_path):
    recorder = SimpleNamespace(
        run=SimpleNamespace(folder=SimpleNamespace(path=str(tmp_path))), level=4, worker_id="master"
    )
    health = ClientHealth(SimpleNamespace(events=events()), recorder)
    health.on_worker_report("w1", {CPU_REPORT_KEY: [85.0, 2.5]})  # before the run: not kept
    assert health.latest_cpu == {}
    health.on_test_start()
    health.on_worker_report("w1", {CPU_REPORT_KEY: [85.04, 2.5]})  # a worker of format 3: no read-behind time
    health.on_worker_report("w2", {"other": 1})  # a report without the figures
    recorder.level = 8
    health.on_worker_report("w1", {CPU_REPORT_KEY: [40.0, 1.0, 31.256, 512.34]})
    health.on_test_stop()  # the master's own last reading
    health.lag_meter.greenlet.kill()
    with open(tmp_path / schema.CLIENT_HEALTH_FILE, newline="") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == schema.CLIENT_HEALTH_COLUMNS
    assert [
        (r["users"], r["worker"], r["cpu_percent"], r["loop_lag_ms"], r["read_behind_p99_ms"], r["rss_mib"])
        for r in rows[:2]
    ] == [
        ("4", "w1", "85.0", "2.5", "", ""),
        ("8", "w1", "40.0", "1.0", "31.26", "512.3"),
    ]
    assert rows[2]["worker"] == "master" and rows[2]["users"] == "8" and len(rows) == 3
    assert float(rows[2]["rss_mib"]) > 10  # this process's own resident memory
    assert health.max_cpu_by_level[4] == 85.04 and health.max_cpu_by_level[8] >= 40.0
    assert health.latest_cpu["w1"] == 40.0


def test_a_worker_adds_its_figures_to_every_report(monkeypatch):
    # the process's clocks as the meter reads them: 0.5 s of CPU over 1 s of wall time between the two readings
    cpu_s, wall_s = iter([10.0, 10.5]), iter([100.0, 101.0])
    clocks = SimpleNamespace(process_time=lambda: next(cpu_s), perf_counter=lambda: next(wall_s))
    monkeypatch.setattr(cpumeter, "time", clocks)
    environment = SimpleNamespace(events=events())
    report_worker_cpu(environment)
    [add_cpu] = environment.events.report_to_master.listeners
    data: dict = {}
    add_cpu("w1", data)
    percent, lag_ms, read_behind_ms, rss = data[CPU_REPORT_KEY]
    assert rss > 10
    assert percent == 50.0 and lag_ms == 0.0  # half a core; no probe ran yet
    assert math.isnan(read_behind_ms)  # no chunk read yet
