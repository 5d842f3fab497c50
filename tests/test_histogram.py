"""The one Prometheus histogram (vllm_stress.core.histogram): a value on a bound counts in that bucket (``le``),
repeated observations count at once, and the buckets come out cumulative with +Inf last, printed as
prometheus_client prints its own."""

from __future__ import annotations

from prometheus_client.utils import floatToGoString

from vllm_stress.core.histogram import Histogram


def test_buckets_are_cumulative_with_a_value_on_a_bound_counted_in_it():
    histogram = Histogram([1, 2.5, 10])
    for value in (0.5, 1.0, 2.0, 2.5, 11.0):
        histogram.observe(value)
    histogram.observe(7.0, times=3)
    assert histogram.buckets(floatToGoString) == [("1.0", 2), ("2.5", 4), ("10.0", 7), ("+Inf", 8)]
    assert (histogram.count, histogram.sum) == (8, 0.5 + 1.0 + 2.0 + 2.5 + 11.0 + 21.0)


def test_an_empty_histogram_has_every_bucket_at_zero():
    assert Histogram([0.1]).buckets(str) == [("0.1", 0), ("inf", 0)]
