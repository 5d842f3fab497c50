"""A process's CPU share since the previous reading, on a clock the test sets."""

from __future__ import annotations

import pytest

from vllm_stress.master import cpumeter


class Clock:
    def __init__(self) -> None:
        self.cpu_s, self.wall_s = 10.0, 1000.0

    def process_time(self) -> float:
        return self.cpu_s

    def perf_counter(self) -> float:
        return self.wall_s


def test_percent_is_cpu_seconds_over_wall_seconds_since_the_previous_reading(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(cpumeter, "time", clock)
    meter = cpumeter.CpuMeter()
    clock.cpu_s, clock.wall_s = 10.5, 1002.0  # 0.5 s of CPU in 2 s
    assert meter.percent() == pytest.approx(25.0)
    clock.cpu_s, clock.wall_s = 13.5, 1004.0  # 3 s in 2 s: threads on two cores
    assert meter.percent() == pytest.approx(150.0)
    assert meter.percent() == 0.0  # no time passed: no share
