"""This process's CPU use since the previous reading, and its resident memory, measured by the process itself."""

from __future__ import annotations

import time

import psutil  # Locust's own dependency


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


def rss_mib() -> float:
    """This process's resident memory now, MiB."""
    return float(psutil.Process().memory_info().rss) / 2**20
