"""The event-loop lag meter: a loop blocked for a while shows as late timers, an idle loop does not."""

from __future__ import annotations

import time

import gevent
import pytest

from vllm_stress.master.looplag import LAG_PROBE_S, LoopLagMeter


@pytest.fixture
def meter():
    lag = LoopLagMeter()
    yield lag
    lag.greenlet.kill()


def test_a_blocked_loop_makes_the_mean_lateness_grow(meter):
    assert meter.mean_ms() == 0.0  # no probe yet
    gevent.sleep(LAG_PROBE_S * 0.5)  # the probe is asleep now
    time.sleep(0.4)  # blocks the loop: the probe wakes about 0.35 s late
    gevent.sleep(LAG_PROBE_S * 4)
    probes = meter.probes
    blocked = meter.mean_ms()
    assert probes >= 2 and blocked >= 300 / probes * 0.8  # one probe's lateness, spread over the probes
    assert meter.probes == 0 and meter.late_s == 0.0  # a reading starts the next one afresh
    gevent.sleep(LAG_PROBE_S * 6)
    assert meter.mean_ms() < blocked
