"""vllm_stress.core.numbers: the one number formatter of the reports."""

import math

import pytest

from vllm_stress.core import numbers


@pytest.mark.parametrize("value", [None, math.nan])
def test_a_missing_figure_is_a_dash_in_every_format(value):
    formats = [numbers.count, numbers.seconds, numbers.milliseconds, numbers.percent, numbers.ratio, numbers.cpu]
    assert [fmt(value) for fmt in formats] == ["-"] * len(formats)


def test_each_kind_of_figure_in_its_unit():
    assert numbers.count(29751.4) == "29,751"
    assert numbers.count(1.23456, 4) == "1.2346"
    assert numbers.seconds(15.184) == "15.18 s"
    assert numbers.seconds(0.0456) == "45.6 ms"
    assert numbers.milliseconds(2.5) == "2,500.0 ms"
    assert numbers.percent(0.251) == "25.1 %"
    assert numbers.percent(-0.052, signed=True) == "-5.2 %"
    assert numbers.ratio(3.04) == "3.0x"
    assert numbers.cpu(97.4) == "97 %"
