"""A greenlet that repeats one action at a fixed interval during a run: the samplers of the run folder's side files
(server metrics, the replica set, client health) start it at test_start and stop it at test_stop."""

from __future__ import annotations

from collections.abc import Callable

import gevent


class Periodic:
    """Calls ``action`` every ``interval_s`` seconds, the first call one interval after ``start``, until ``stop``."""

    def __init__(self) -> None:
        self.greenlet: gevent.Greenlet[[float, Callable[[], object]], None] | None = None

    def start(self, interval_s: float, action: Callable[[], object]) -> None:
        self.greenlet = gevent.spawn(self._repeat, interval_s, action)

    def stop(self) -> None:
        if self.greenlet is not None:
            self.greenlet.kill()
            self.greenlet = None

    @staticmethod
    def _repeat(interval_s: float, action: Callable[[], object]) -> None:
        while True:
            gevent.sleep(interval_s)
            action()
