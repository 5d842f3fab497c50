"""The simulator's HTTP layer as a possible bound: the connections it accepted (``vllm_stress_sim_connections_total``
on its /metrics, a name of its own: vLLM exports none) and, with ``--accept-cost-ms``, the time its one event loop
spends on each (as a TLS handshake or a busy front end's per-connection setup would), in which it serves nothing else
(docs/concepts/simulator.md, section 11)."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, Metric

METRIC = "vllm_stress_sim_connections"  # exposed with its counter's _total suffix


class Connections:
    """Collector of the accepted connections' count; ``accept`` is the listener's per-connection hook."""

    def __init__(self, accept_cost_s: float = 0.0, then: Callable[[socket.socket], socket.socket] | None = None):
        if accept_cost_s < 0:
            raise ValueError(f"--accept-cost-ms must not be negative, got {accept_cost_s * 1000:g}")
        self.accepted = 0
        self.accept_cost_s = accept_cost_s
        self.then = then  # what else wraps an accepted connection (the request log's arrival stamps)

    def accept(self, connection: socket.socket) -> socket.socket:
        """A connection the listener accepted: counted, then the event loop held for the accept cost."""
        self.accepted += 1
        if self.accept_cost_s:
            time.sleep(self.accept_cost_s)  # blocks the loop on purpose: the HTTP layer's time, nothing else runs
        return self.then(connection) if self.then else connection

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(METRIC, "Connections the simulator's HTTP server accepted.")
        family.add_metric([], self.accepted)
        yield family
