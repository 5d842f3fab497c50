"""vllm_stress.core.slo: the one --slo grammar, for goodput and for the SLO search."""

import math

import pytest

from vllm_stress.core.slo import level_slos, parse_items, request_slos, stop_rules

COLUMNS = {"ttft": "ttft_s", "tpot": "tpot_s", "e2e": "e2e_s"}


def test_limits_are_milliseconds_unless_they_say_seconds():
    assert parse_items("ttft=2s, tpot=50,e2e=1500ms") == [
        ("ttft", 2.0, "s"),
        ("tpot", 50.0, None),
        ("e2e", 1500.0, "ms"),
    ]
    assert {slo.name: slo.limit for slo in request_slos("ttft=2s,tpot=50", COLUMNS)} == {"ttft": 2.0, "tpot": 0.05}


def test_level_slos_limit_a_percentile_or_the_success_rate():
    ttft, success, tpot = level_slos("ttft_p99=2000,success=99.9%,tpot_p50=0.05s", ["ttft", "tpot"], [50, 99])
    assert (ttft.field, ttft.limit) == ("ttft_p99_s", 2.0)
    assert (success.field, success.limit) == ("success_rate", pytest.approx(0.999))
    assert (tpot.field, tpot.limit) == ("tpot_p50_s", 0.05)
    assert ttft.met(1.9) and not ttft.met(2.1) and not ttft.met(math.nan) and not ttft.met(None)
    assert success.met(0.9995) and not success.met(0.99)
    assert ttft.excess(3.0) == pytest.approx(1.5)
    assert success.excess(0.998) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ttft=fast", "--slo: 'ttft=fast' is not NAME=LIMIT"),
        ("", "--slo: give at least one"),
        ("latency=2s", "--slo: latency=2s is not a per-request latency limit"),
        ("ttft=5%", "--slo: ttft=5% is not a per-request latency limit"),
        ("success=99%", "--slo: success=99% is not a per-request latency limit"),
        ("ttft=2s,ttft_p50=1s", "--slo: ttft is limited twice"),
    ],
)
def test_bad_request_slos_are_one_line(text, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")) as error:
        request_slos(text, COLUMNS)
    assert "\n" not in str(error.value)


def test_an_unknown_level_slo_lists_the_known_ones():
    with pytest.raises(
        ValueError, match=r"unknown 'ttft_p95' \(use ttft, each with an optional _p50 or _p99, or success\)"
    ):
        level_slos("ttft_p95=1s", ["ttft"], [50, 99])


def test_a_bare_metric_is_a_per_request_limit_and_a_levels_p99():
    """One grammar: ``ttft=2s`` and ``ttft_p99=2000`` mean the same to every command."""
    for text in ("ttft=2s", "ttft_p99=2000", "ttft_p99=2000ms"):
        (per_request,) = request_slos(text, COLUMNS)
        (judged,) = level_slos(text, ["ttft"], [50, 99])
        assert (per_request.name, per_request.field, per_request.limit) == ("ttft", "ttft_s", 2.0)
        assert (judged.name, judged.field, judged.limit) == ("ttft_p99", "ttft_p99_s", 2.0)
    (median,) = level_slos("ttft_p50=0.5s", ["ttft"], [50, 99])
    assert (median.name, median.limit) == ("ttft_p50", 0.5)


def test_every_command_with_an_slo_takes_both_forms():
    from vllm_stress.analysis.cli import parse_slo
    from vllm_stress.scenarios.search.judge import parse_slos

    assert parse_slo("ttft_p99=2000") == parse_slo("ttft=2s") == {"ttft": 2.0}
    assert [slo.name for slo in parse_slos("ttft=2s,success=99%")] == ["ttft_p99", "success"]
    assert parse_slos("ttft=2s") == parse_slos("ttft_p99=2000")


def test_stop_rules_read_the_slo_grammar_with_a_greater_than():
    rules = stop_rules("errors>5%, ttft_p99>30s,e2e>1500,saturated,tpot_p50>0.05s", COLUMNS, [50, 99])
    assert [(rule.name, rule.field, rule.column) for rule in rules] == [
        ("errors", "failures", ""),
        ("ttft_p99", "ttft_p99_s", "ttft_s"),
        ("e2e_p99", "e2e_p99_s", "e2e_s"),  # a bare metric is its p99, a bare number milliseconds
        ("saturated", "", ""),
        ("tpot_p50", "tpot_p50_s", "tpot_s"),
    ]
    assert [rule.limit for rule in rules if rule.field] == [0.05, 30.0, 1.5, pytest.approx(0.05)]
    assert [rule.percentile for rule in rules if rule.column] == [99, 99, 50]
    assert [rule.limit for rule in stop_rules("errors>0.1,errors>10", COLUMNS, [99])] == [0.1, 0.1]


def test_a_stop_rule_trips_above_its_limit_and_names_the_value():
    errors, ttft = stop_rules("errors>5%,ttft>30s", COLUMNS, [99])
    assert errors.reason({"requests": 1000, "failures": 72}) == "errors 7.2 % > 5.0 %"
    assert errors.reason({"requests": 20, "failures": 1}) == ""  # at the limit: not above it
    assert ttft.reason({"ttft_p99_s": 31.25}) == "ttft_p99 31.25 s > 30.00 s"
    assert ttft.reason({"ttft_p99_s": 29.0}) == ""
    assert errors.reason({"requests": 0, "failures": 0}) == ttft.reason({}) == ""  # unknown (no request): no trip


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("errors=5%", "--stop-on: 'errors=5%' is not NAME>LIMIT (e.g. ttft>2s, ttft_p99>2000ms, errors>5%)"),
        ("ttft_p95>1s", "--stop-on: ttft_p95>1s is not a rule (use ttft, each with an optional _p50 or _p99, "),
        ("ttft>5%", "--stop-on: ttft>5% is not a rule"),
        ("success>99%", "--stop-on: success>99% is not a rule"),
        ("saturated>3", "--stop-on: saturated>3 is not a rule"),
        (" , ", "--stop-on: give at least one rule, e.g. errors>5%"),
    ],
)
def test_a_bad_stop_rule_is_one_line(text, message):
    with pytest.raises(ValueError) as error:
        stop_rules(text, {"ttft": "ttft_s"}, [50, 99])
    assert str(error.value).startswith(message) and "\n" not in str(error.value)
