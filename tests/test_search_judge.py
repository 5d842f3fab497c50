"""Judging an SLO search's probe (vllm_stress/scenarios/search/judge.py) on synthetic runs with exact answers
(vllm_stress.analysis.io.synthetic)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.search.judge import judge, parse_slos
from vllm_stress.scenarios.search.space import Space

USERS = Space("users", 1, 64, 0.1)


def synthetic_probe(folder: Path, e2e_s: float, users: int = 5, lag_s: float | None = None) -> Path:
    """A steady closed-loop level of ``users`` users with one e2e, as a probe's run folder."""
    (level,) = step_levels([users], hold_s=50.0)
    rows = closed_loop_rows(users, level[1], level[3], e2e_s, completion_tokens=100)
    if lag_s is not None:
        rows["schedule_lag_s"] = lag_s
    return write_run(folder, rows, [level], meta={"complete": True})


def test_slo_units_are_vllms():
    ttft, success, tpot = parse_slos("ttft_p99=2000,success=99.9%,tpot_p50=0.05s")
    assert (ttft.field, ttft.limit) == ("ttft_p99_s", 2.0) and success.field == "success_rate"
    assert success.limit == pytest.approx(0.999)
    assert (tpot.field, tpot.limit) == ("tpot_p50_s", 0.05)


def test_an_slo_the_search_cannot_judge_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="unknown 'goodput_p99'"):
        parse_slos("goodput_p99=5")


def test_a_steady_probe_within_its_slos_passes(tmp_path):
    (slo,) = parse_slos("e2e_p50=6s")
    probe = judge([synthetic_probe(tmp_path / "run-1", 5.0)], 5, 5, [slo], USERS)
    assert probe.passed and probe.steady and probe.reason == "" and probe.missed == [] and probe.runs == 1
    assert probe.values["e2e_p50"] == pytest.approx(5.0, abs=0.01) and probe.values["output_tokens_per_s"] > 0
    assert probe.ci95 == {}  # one run: no interval


def test_repeats_are_judged_on_their_mean_with_its_ci(tmp_path):
    runs = [synthetic_probe(tmp_path / f"run-{k}", e2e) for k, e2e in enumerate((5.0, 5.2, 5.4), 1)]
    (slo,) = parse_slos("e2e_p50=5300")
    probe = judge(runs, 5, 5, [slo], USERS)
    assert probe.passed and probe.runs == 3 and probe.values["e2e_p50"] == pytest.approx(5.2, abs=0.01)
    # Student t with 2 degrees of freedom: 4.3027 x 0.2 s / sqrt(3)
    assert probe.ci95["e2e_p50"] == pytest.approx(4.3027 * 0.2 / 3**0.5, rel=0.05)
    (tight,) = parse_slos("e2e_p50=5100")
    above = judge(runs, 5, 5, [tight], USERS)
    assert not above.passed and above.missed == ["e2e_p50"] and above.reason == "misses e2e_p50 ≤ 5100 ms"


def test_an_open_loop_probe_whose_client_fell_behind_fails(tmp_path):
    space = Space("rate", 1.0, 64.0, 0.1, pool_seconds=2.5)
    (slo,) = parse_slos("e2e_p50=6s")
    behind = judge([synthetic_probe(tmp_path / "late", 5.0, lag_s=2.0)], 2.0, 5, [slo], space)
    assert not behind.passed and behind.reason == (
        "arrivals waited 2.0 s (p99) for a free user: the client could not keep up (raise --pool-seconds above 2.5)"
    )
    on_time = judge([synthetic_probe(tmp_path / "on-time", 5.0, lag_s=0.0)], 2.0, 5, [slo], space)
    assert on_time.passed


def test_a_probe_without_its_level_fails_unsteady(tmp_path):
    (slo,) = parse_slos("e2e_p50=6s")
    runs = [synthetic_probe(tmp_path / "run-1", 5.0), synthetic_probe(tmp_path / "run-2", 5.0, users=4)]
    never = judge(runs, 5, 5, [slo], USERS)
    assert (never.passed, never.steady, never.reason, never.runs) == (
        False,
        False,
        "run 2: the level was never held",
        2,
    )
    missing = judge([tmp_path / "nothing"], 5, 5, [slo], USERS)
    assert not missing.passed and missing.reason.startswith("not measurable: ")
