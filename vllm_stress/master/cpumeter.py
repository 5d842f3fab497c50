"""This process's CPU use since the previous reading, measured by the process itself."""

from __future__ import annotations

import time


class CpuMeter:
    """This process's CPU (user + system, every thread) since the previous reading, in percent of one core."""

    def __init__(self) -> None:
        self.cpu_s, self.wall_s = time.process_time(), time.perf_counter()

    def percent(self) -> float:
        cpu_s, wall_s = time.process_time(), time.perf_counter()
        elapsed = wall_s - self.wall_s
        share = (cpu_s - self.cpu_s) / elapsed if elapsed > 0 else 0.0
        self.cpu_s, self.wall_s = cpu_s, wall_s
        return 100 * share
