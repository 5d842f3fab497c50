"""The window rules of vllm_stress.core.metrics, which the report, plan, the live bound and calibrate share: a moment
is in ``[a, b)``, a health sample counts when its span since its process's previous sample overlaps the window."""

from __future__ import annotations

import numpy as np

from vllm_stress.core.metrics import health_samples, in_window


def test_a_moment_on_the_start_is_in_and_one_on_the_end_is_not():
    assert in_window(10.0, 10.0, 20.0) and not in_window(20.0, 10.0, 20.0)
    times = np.array([9.999, 10.0, 15.0, 19.999, 20.0])
    assert in_window(times, 10.0, 20.0).tolist() == [False, True, True, True, False]
    per_time = in_window(times, np.array([0, 0, 16, 0, 0]), np.array([1, 11, 20, 20, 21]))
    assert per_time.tolist() == [False, True, False, True, True]


def sample(time, worker="w1"):
    return {"time": time, "worker": worker}


def test_a_health_sample_counts_when_its_span_overlaps_the_window():
    samples = [sample(5), sample(9), sample(12), sample(12, "w2"), sample(18), sample(21), sample(24), sample(30, "w2")]
    inside = health_samples(samples, 10.0, 20.0)
    # w1: (9, 12] and (12, 18] and (18, 21] overlap [10, 20); (5, 9] and (21, 24] do not. w2: its first sample at 12
    # spans only 12; (12, 30] overlaps.
    assert [(s["worker"], s["time"]) for s in inside] == [("w1", 12), ("w2", 12), ("w1", 18), ("w1", 21), ("w2", 30)]


def test_a_worker_that_joins_late_is_not_in_the_windows_before_it_came():
    assert health_samples([sample(35, "late"), sample(38, "late")], 10.0, 20.0) == []
    assert health_samples([sample(20, "late")], 10.0, 20.0) == []
