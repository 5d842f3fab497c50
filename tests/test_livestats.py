"""The web UI's live figures from the rows received: per-level latency histograms, recent latencies, tokens/s."""

from __future__ import annotations

import pytest

from vllm_stress.core import schema
from vllm_stress.master.livestats import LiveStats


def request_row(**fields) -> list:
    values = dict.fromkeys(schema.REQUEST_COLUMNS, "") | {"ok": 1, "count_mismatch": 0, "users": 4} | fields
    return [values[column] for column in schema.REQUEST_COLUMNS]


def measured(end: float, ttft: float, tokens: int, users: int = 4) -> list:
    return request_row(end_time=end, ttft_s=ttft, tpot_s=0.02, e2e_s=1.5, completion_tokens=tokens, users=users)


def test_levels_count_outcomes_and_keep_measured_latencies_only():
    stats = LiveStats(report_lag_s=0.0)
    stats.add(
        [
            measured(100.2, 0.1, 10),
            measured(100.7, 0.2, 10),
            request_row(ok=0, error="HTTP 500", end_time=101.0),
            request_row(ok=0, error=schema.ABORTED, end_time=101.0, completion_tokens=3),
            request_row(count_mismatch=1, end_time=101.5, e2e_s=9.0, ttft_s=5.0),  # a request, not measured
            measured(102.0, 0.3, 10, users=8),
        ]
    )
    level = stats.latencies_by_level[4]
    assert (level.requests, level.failures, level.aborted) == (4, 1, 1)  # failures are requests, aborted ones not
    assert dict(level.ttft_ms) == {100.0: 1, 200.0: 1} and dict(level.e2e_ms) == {1500.0: 2}
    assert dict(level.tpot_ms) == {20.0: 2}
    assert stats.latencies_by_level[8].requests == 1
    assert [end for end, _, _, _ in stats.recent] == [100.2, 100.7, 102.0]


def test_output_tokens_per_s_counts_the_seconds_every_process_has_reported():
    stats = LiveStats(report_lag_s=3.0)
    stats.add([measured(100.5, 0.1, 40), measured(105.9, 0.1, 60), measured(110.0, 0.1, 1000)])
    assert dict(stats.tokens_by_second) == {100: 40, 105: 60, 110: 1000}
    # now 113.5, 3 s of report lag: seconds 100 to 109 are counted, the latest one is not in yet
    assert stats.output_tokens_per_s(window_s=10, now=113.5) == pytest.approx(10.0)
    assert stats.output_tokens_per_s(window_s=5, now=113.5) == pytest.approx(12.0)


def test_the_first_answer_token_is_kept_for_a_reasoning_models_rows_only():
    stats = LiveStats(report_lag_s=0.0)
    thinking = request_row(end_time=100.0, e2e_s=2.0, ttft_s=0.1, ttfa_s=0.9, reasoning_tokens=40, completion_tokens=50)
    plain = request_row(end_time=101.0, e2e_s=2.0, ttft_s=0.1, ttfa_s=0.1, completion_tokens=50)
    stats.add([thinking, plain])
    assert [ttfa for _, _, _, ttfa in stats.recent] == [0.9, ""]


def test_rows_of_a_traffic_class_are_also_counted_per_class():
    stats = LiveStats(report_lag_s=0.0)
    stats.add([measured(100.0, 0.1, 10), request_row(**{"class": "batch", "ok": 0, "error": "HTTP 500"})])
    assert stats.latencies_by_level[4].requests == 2
    assert list(stats.latencies_by_class) == [(4, "batch")] and stats.latencies_by_class[4, "batch"].failures == 1


@pytest.mark.parametrize("in_figures", [False, True])
def test_canaries_are_kept_apart_unless_counted_in(in_figures):
    stats = LiveStats(report_lag_s=0.0, canaries_in_figures=in_figures)
    stats.add([measured(100.0, 0.1, 10), request_row(end_time=100.5, e2e_s=0.3, completion_tokens=7, canary="q1")])
    assert stats.latencies_by_level[4].requests == (2 if in_figures else 1)
    apart = stats.canaries_by_level[4].requests if 4 in stats.canaries_by_level else 0
    assert apart == (0 if in_figures else 1)
    assert sum(stats.tokens_by_second.values()) == (17 if in_figures else 10)
    assert len(stats.recent) == (2 if in_figures else 1)
