"""How late this process's event loop runs its timers: a sign that the process waits for a CPU core."""

from __future__ import annotations

import time

import gevent

LAG_PROBE_S = 0.05  # how often the probe checks


class LoopLagMeter:
    """A greenlet sleeps LAG_PROBE_S again and again and notes how much later than asked it wakes; ``mean_ms`` is
    the mean lateness since the previous reading."""

    def __init__(self) -> None:
        self.late_s, self.probes = 0.0, 0
        self.greenlet = gevent.spawn(self._probe)

    def _probe(self) -> None:
        while True:
            asked = time.perf_counter() + LAG_PROBE_S
            gevent.sleep(LAG_PROBE_S)
            self.late_s += max(time.perf_counter() - asked, 0.0)
            self.probes += 1

    def mean_ms(self) -> float:
        mean = self.late_s / self.probes if self.probes else 0.0
        self.late_s, self.probes = 0.0, 0
        return mean * 1000
