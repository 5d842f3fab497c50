"""The SLO search against the simulator with --max-num-seqs 32: the same answer as a dense sweep read by hand, in
fewer probes. e2e p50 is the SLO: it grows with the users at every level (TTFT of this tiny profile comes in waves)."""

import json

import pytest

from scenarios.__main__ import main
from scenarios.search import next_users, parse_slos

SIM = ["--simulator-arg=--max-num-seqs=32", "--workers", "1"]
SLO_MS = 340
DENSE = [24, 28, 32, 36, 40, 44, 48]


def test_search_finds_what_a_dense_sweep_finds(tmp_path):
    assert main(["run", "--scenario", "smoke", "--out", str(tmp_path / "dense"), *SIM,
                 f"--locust-arg=--levels={','.join(map(str, DENSE))}", "--locust-arg=--step-time=auto"]) == 0
    levels = json.loads((tmp_path / "dense" / "report" / "summary.json").read_text())["levels"]
    by_hand = max(level["users"] for level in levels if level["steady"] and level["e2e_p50_s"] * 1000 <= SLO_MS)
    assert main(["search", "--scenario", "smoke", "--slo", f"e2e_p50={SLO_MS}", "--low", "8", "--high", "128",
                 "--out", str(tmp_path / "search"), *SIM]) == 0
    result = json.loads((tmp_path / "search" / "search.json").read_text())
    assert result["finished"] and result["binding"].startswith("misses e2e_p50")
    assert abs(result["answer_users"] - by_hand) <= 4  # one step of the dense sweep
    dense_from_8_step_4 = (128 - 8) // 4 + 1
    assert len(result["probes"]) < dense_from_8_step_4
    # resumed: a second call re-judges the probes on disk and runs none
    assert main(["search", "--scenario", "smoke", "--slo", f"e2e_p50={SLO_MS}", "--low", "8", "--high", "128",
                 "--out", str(tmp_path / "search"), *SIM]) == 0
    again = json.loads((tmp_path / "search" / "search.json").read_text())
    assert again["answer_users"] == result["answer_users"] and len(again["probes"]) == len(result["probes"])


@pytest.mark.fast
def test_bracket_then_bisect():
    class P:
        def __init__(self, passed):
            self.passed = passed

    probes = {}
    steps = []
    while (users := next_users(probes, 4, 128, 0.1)) is not None:
        steps.append(users)
        probes[users] = P(users <= 37)
    assert steps == [4, 8, 16, 32, 64, 48, 40, 36, 38] and max(u for u, p in probes.items() if p.passed) == 36


@pytest.mark.fast
def test_slo_units_are_vllms():
    ttft, success, tpot = parse_slos("ttft_p99=2000,success=99.9%,tpot_p50=0.05s")
    assert (ttft.field, ttft.limit) == ("ttft_p99_s", 2.0) and success.field == "success_rate"
    assert success.limit == pytest.approx(0.999)
    assert (tpot.field, tpot.limit) == ("tpot_p50_s", 0.05)
