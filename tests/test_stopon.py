"""vllm_stress.core.stopon: a level judged against --stop-on's rules, on constructed level data (the step ramp that
ends after it: test_shape.py; a run the simulator breaks: test_stress.py)."""

from vllm_stress.core.slo import stop_rules
from vllm_stress.core.stopon import judge, queue_means, saturated

RULES = stop_rules("errors>5%,ttft_p99>2s,saturated", {"ttft": "ttft_s", "e2e": "e2e_s"}, [50, 99])
CALM = {"requests": 200.0, "failures": 2.0, "ttft_p99_s": 0.4}


def waiting(*values: float, start: float = 100.0, every: float = 1.0) -> list[dict[str, float]]:
    """The server's queue scraped every ``every`` seconds from ``start``."""
    return [{"time": start + i * every, "waiting": value} for i, value in enumerate(values)]


def test_a_level_within_every_rule_goes_on():
    assert judge(RULES, CALM, waiting(3, 4, 3, 5, 4, 3), 100.0, 106.0) == ""


def test_the_first_rule_tripped_gives_the_reason():
    assert judge(RULES, CALM | {"failures": 20.0}, [], 100.0, 106.0) == "errors 10.0 % > 5.0 %"
    assert judge(RULES, CALM | {"ttft_p99_s": 2.5}, [], 100.0, 106.0) == "ttft_p99 2.50 s > 2.00 s"
    both = CALM | {"failures": 20.0, "ttft_p99_s": 2.5}
    assert judge(RULES, both, [], 100.0, 106.0) == "errors 10.0 % > 5.0 %"  # in the order given
    assert judge(RULES[1:], both, [], 100.0, 106.0) == "ttft_p99 2.50 s > 2.00 s"


def test_a_queue_that_grows_through_the_hold_is_saturation():
    scrapes = waiting(1, 2, 4, 3, 8, 12)  # thirds [100, 102), [102, 104), [104, 106): means 1.5, 3.5, 10
    assert queue_means(scrapes, 100.0, 106.0) == [1.5, 3.5, 10.0]
    expected = "saturated: the server's queue grew through the hold (1.5 → 3.5 → 10 waiting, the means of its thirds)"
    assert saturated(scrapes, 100.0, 106.0) == expected
    assert judge(RULES, CALM, scrapes, 100.0, 106.0) == expected
    before = waiting(50, 40, start=90.0)  # scrapes outside the hold do not count
    assert saturated(before + scrapes + waiting(0, start=106.0), 100.0, 106.0) == expected


def test_a_queue_that_settled_or_was_not_scraped_is_no_saturation():
    assert saturated(waiting(30, 30, 30, 30, 30, 30), 100.0, 106.0) == ""  # long, but steady
    assert saturated(waiting(1, 2, 9, 9, 8, 8), 100.0, 106.0) == ""  # grew, then settled in the last third
    assert saturated(waiting(1, 5, start=100.0, every=4.0), 100.0, 106.0) == ""  # the middle third unscraped
    assert saturated([], 100.0, 106.0) == ""
