"""``client_health.csv``: the CPU, event-loop lag, read-behind time and resident memory of every load-generating
process, and the highest CPU per level."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any

from vllm_stress.client.readbehind import read_behind
from vllm_stress.core import schema
from vllm_stress.master.cpumeter import CpuMeter, rss_mib
from vllm_stress.master.csvappender import CsvAppender
from vllm_stress.master.looplag import LoopLagMeter
from vllm_stress.master.periodic import Periodic

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.master.runrecorder import LocalRecorder

CLIENT_HEALTH_INTERVAL_S = 5.0
CPU_REPORT_KEY = "vllm_stress_cpu"  # in worker reports: [CPU %, event-loop lag ms, read-behind p99 ms] since the
# previous report, [resident memory MiB] now


def report_worker_cpu(environment: Environment) -> None:
    """On a worker: send its CPU, event-loop lag and read-behind p99 since the previous report and its resident memory
    with every worker report (3 s)."""
    meter, lag = CpuMeter(), LoopLagMeter()

    def add_cpu(client_id: str, data: dict[str, Any], **_kw: object) -> None:
        data[CPU_REPORT_KEY] = [meter.percent(), lag.mean_ms(), read_behind.p99_ms(), rss_mib()]

    environment.events.report_to_master.add_listener(add_cpu)


class ClientHealth:
    """The master's (or local runner's) own figures every CLIENT_HEALTH_INTERVAL_S and each worker's with its
    reports, into the recorder's run folder."""

    def __init__(self, environment: Environment, recorder: LocalRecorder) -> None:
        self.recorder = recorder
        self.max_cpu_by_level: dict[int, float] = {}  # the highest CPU % of any load generator while at a level
        self.latest_cpu: dict[str, float] = {}  # by process: its last figures
        self.latest_lag_ms: dict[str, float] = {}
        self.cpu_meter = CpuMeter()
        self.lag_meter = LoopLagMeter()
        self.file: CsvAppender | None = None
        self.sampling = Periodic()
        environment.events.test_start.add_listener(self.on_test_start)  # after the recorder's: the folder is open
        environment.events.test_stop.add_listener(self.on_test_stop)
        environment.events.worker_report.add_listener(self.on_worker_report)

    def on_test_start(self, **_kw: object) -> None:
        folder = self.recorder.run.folder
        if folder is None:
            return
        self.max_cpu_by_level.clear()
        self.latest_cpu.clear()
        self.latest_lag_ms.clear()
        self.cpu_meter.percent()  # from now on
        self.lag_meter.mean_ms()
        read_behind.p99_ms()
        self.file = CsvAppender(folder.path, schema.CLIENT_HEALTH_FILE, schema.CLIENT_HEALTH_COLUMNS)
        self.sampling.start(CLIENT_HEALTH_INTERVAL_S, self._record_own)

    def on_test_stop(self, **_kw: object) -> None:
        self.sampling.stop()
        if self.file:
            self._record_own()
            self.file.close()
            self.file = None

    def _record_own(self) -> None:
        own = (self.cpu_meter.percent(), self.lag_meter.mean_ms(), read_behind.p99_ms(), rss_mib())
        self._write(self.recorder.worker_id, *own)

    def on_worker_report(self, client_id: str, data: dict[str, Any], **_kw: object) -> None:
        if CPU_REPORT_KEY in data and self.file:
            self._write(client_id, *data[CPU_REPORT_KEY])

    def _write(
        self, process: str, percent: float, lag_ms: float, read_behind_ms: float = math.nan, rss: float = math.nan
    ) -> None:
        users = self.recorder.level
        behind = "" if math.isnan(read_behind_ms) else round(read_behind_ms, 2)  # a worker of format 3 sends none
        memory = "" if math.isnan(rss) else round(rss, 1)  # nor one of format 4
        if self.file:
            self.file.write(
                [round(time.time(), 3), users, process, round(percent, 1), round(lag_ms, 1), behind, memory]
            )
        self.latest_cpu[process], self.latest_lag_ms[process] = percent, lag_ms
        self.max_cpu_by_level[users] = max(self.max_cpu_by_level.get(users, 0.0), percent)
