"""search.json (vllm_stress/scenarios/search/result.py): the answer, its bracket, the SLO that binds, and a search
folder read back to resume."""

from __future__ import annotations

import json
import math

import pytest

from vllm_stress.core.slo import Slo
from vllm_stress.scenarios.run.errors import ScenarioError
from vllm_stress.scenarios.search.judge import Probe
from vllm_stress.scenarios.search.result import RESULT_FILE, binding, excess, load_probes, result, save
from vllm_stress.scenarios.search.space import Space

E2E = Slo("e2e_p50", "e2e_p50_s", 1.0)
SUCCESS = Slo("success", "success_rate", 0.99)
SPACE = Space("users", 4, 64, 0.1)


def probe(load: int, e2e: float, success: float = 1.0, ci95: float | None = None) -> Probe:
    missed = [slo.name for slo, value in ((E2E, e2e), (SUCCESS, success)) if not slo.met(value)]
    ci = {} if ci95 is None else {"e2e_p50": ci95}
    return Probe(
        load, load, not missed, True, "misses" if missed else "", {"e2e_p50": e2e, "success": success}, ci, 1, missed
    )


def test_the_slo_that_binds_is_the_one_missed_by_the_most():
    best, above = probe(8, 0.9, ci95=0.05), probe(16, 1.2, success=0.9, ci95=0.1)
    # e2e misses by 1.2x, success by (1 - 0.9) / (1 - 0.99) = 10x
    assert binding([E2E, SUCCESS], best, above) == {
        "slo": "success",
        "limit": 0.99,
        "answer_value": 1.0,
        "answer_ci95": None,
        "above_value": 0.9,
        "above_ci95": None,
    }
    assert binding([E2E], best, above) == {
        "slo": "e2e_p50",
        "limit": 1.0,
        "answer_value": 0.9,
        "answer_ci95": 0.05,
        "above_value": 1.2,
        "above_ci95": 0.1,
    }
    assert binding([E2E], None, above)["answer_value"] is None  # nothing passed
    assert binding([E2E], best, None) is None and binding([E2E], best, probe(16, 0.5)) is None


def test_a_value_not_measured_misses_by_the_most():
    assert excess(E2E, None) == math.inf and excess(E2E, 2.0) == 2.0


def test_the_result_holds_every_probe_in_load_order_and_the_bracket():
    probes = {load: probe(load, load / 10) for load in (4, 8, 16, 12, 10, 11)}
    held = result("smoke", [E2E], probes, SPACE, repeats=1)
    assert [p["load"] for p in held["probes"]] == [4, 8, 10, 11, 12, 16]
    assert (held["answer"], held["answer_users"], held["next_failing"]) == (10, 10, 11)
    assert held["failing_reason"] == "misses" and held["binding"]["slo"] == "e2e_p50"
    assert (
        held["finished"]
        and held["pool_seconds"] is None
        and held["slo"] == [{"name": "e2e_p50", "field": "e2e_p50_s", "limit": 1.0}]
    )
    rate = result("smoke", [E2E], {}, Space("rate", 1.0, 8.0, 0.1, 3.0), repeats=2)
    assert rate["answer"] is None and rate["pool_seconds"] == 3.0 and not rate["finished"] and rate["repeats"] == 2


def test_a_saved_search_is_resumed_with_its_probes(tmp_path):
    probes = {load: probe(load, load / 10) for load in (4, 8, 16)}
    save(tmp_path, result("smoke", [E2E], probes, SPACE, repeats=1))
    assert json.loads((tmp_path / RESULT_FILE).read_text())["answer"] == 8
    assert load_probes(tmp_path, SPACE, repeats=1) == sorted(probes.values(), key=lambda p: p.load)
    assert load_probes(tmp_path / "new", SPACE, repeats=1) == []
    with pytest.raises(ScenarioError, match="holds a search over users with 1 repeat\\(s\\), not over users with 3"):
        load_probes(tmp_path, SPACE, repeats=3)
    with pytest.raises(ScenarioError, match="not over rate with 1: choose another --out"):
        load_probes(tmp_path, Space("rate", 1.0, 8.0, 0.1), repeats=1)
