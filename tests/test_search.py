"""The SLO search against the simulator with --max-num-seqs 32: the same answer as a dense sweep read by hand, in
fewer probes; the same search over arrival rate (open loop); repeats judged on their mean with its CI (synthetic runs
with exact answers); a search watched in the web UI. e2e p50 is the SLO: it grows with the load at every level (TTFT
of this tiny profile comes in waves)."""

import json
import math
import threading
import time

import pytest
import requests

from vllm_stress.analysis.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.scenarios.cli import main
from vllm_stress.scenarios.runner import free_port
from vllm_stress.scenarios.search import Space, binding, judge, next_load, parse_slos

SIM = ["--simulator-arg=--max-num-seqs=32", "--workers", "1"]
SLO_MS = 340
DENSE = [24, 28, 32, 36, 40, 44, 48]


def test_search_finds_what_a_dense_sweep_finds(scenarios, tmp_path):
    assert (
        scenarios(
            [
                "run",
                "--scenario",
                "smoke",
                "--out",
                str(tmp_path / "dense"),
                *SIM,
                f"--locust-arg=--levels={','.join(map(str, DENSE))}",
                "--locust-arg=--step-time=auto",
            ]
        )
        == 0
    )
    levels = json.loads((tmp_path / "dense" / "report" / "summary.json").read_text())["levels"]
    by_hand = max(level["users"] for level in levels if level["steady"] and level["e2e_p50_s"] * 1000 <= SLO_MS)
    assert (
        scenarios(
            [
                "search",
                "--scenario",
                "smoke",
                "--slo",
                f"e2e_p50={SLO_MS}",
                "--low",
                "8",
                "--high",
                "128",
                "--out",
                str(tmp_path / "search"),
                *SIM,
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "search" / "search.json").read_text())
    assert (
        result["finished"]
        and result["failing_reason"].startswith("misses e2e_p50")
        and result["binding"]["slo"] == "e2e_p50"
    )
    assert abs(result["answer_users"] - by_hand) <= 4  # one step of the dense sweep
    dense_from_8_step_4 = (128 - 8) // 4 + 1
    assert len(result["probes"]) < dense_from_8_step_4
    # resumed: a second call re-judges the probes on disk and runs none
    assert (
        scenarios(
            [
                "search",
                "--scenario",
                "smoke",
                "--slo",
                f"e2e_p50={SLO_MS}",
                "--low",
                "8",
                "--high",
                "128",
                "--out",
                str(tmp_path / "search"),
                *SIM,
            ]
        )
        == 0
    )
    again = json.loads((tmp_path / "search" / "search.json").read_text())
    assert again["answer_users"] == result["answer_users"] and len(again["probes"]) == len(result["probes"])


def test_search_over_arrival_rate(scenarios, tmp_path):
    """The open loop: each probe sends at its rate with ceil(rate x 2 s) users, and a passing probe did send at its
    rate. Above the server's capacity e2e grows without bound (or the pool runs dry), so a probe there fails."""
    assert (
        scenarios(
            [
                "search",
                "--scenario",
                "smoke",
                "--over",
                "rate",
                "--slo",
                f"e2e_p50={SLO_MS}",
                "--low",
                "32",
                "--high",
                "256",
                "--precision",
                "0.2",
                "--pool-seconds",
                "2",
                "--out",
                str(tmp_path / "rate"),
                "--locust-arg=--max-step-time=40",
                *SIM,
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "rate" / "search.json").read_text())
    assert result["finished"] and result["over"] == "rate" and result["answer"] >= 32
    assert result["next_failing"] is not None and result["next_failing"] - result["answer"] <= 0.2 * result["answer"]
    for probe in result["probes"]:
        assert probe["users"] == math.ceil(probe["load"] * 2)
        if probe["passed"]:  # Poisson arrivals over a steady window of a few hundred requests
            assert probe["values"]["requests_per_s"] == pytest.approx(probe["load"], rel=0.25), probe
    assert "Arrival wait p99" in (tmp_path / "rate" / "search.md").read_text()


def test_bracket_then_bisect():
    class P:
        def __init__(self, passed):
            self.passed = passed

    probes = {}
    steps = []
    while (users := next_load(probes, Space("users", 4, 128, 0.1))) is not None:
        steps.append(users)
        probes[users] = P(users <= 37)
    assert steps == [4, 8, 16, 32, 64, 48, 40, 36, 38] and max(u for u, p in probes.items() if p.passed) == 36


def test_slo_units_are_vllms():
    ttft, success, tpot = parse_slos("ttft_p99=2000,success=99.9%,tpot_p50=0.05s")
    assert (ttft.field, ttft.limit) == ("ttft_p99_s", 2.0) and success.field == "success_rate"
    assert success.limit == pytest.approx(0.999)
    assert (tpot.field, tpot.limit) == ("tpot_p50_s", 0.05)


def synthetic_probe(folder, e2e_s: float, users: int = 5, lag_s: float | None = None):
    """A steady closed-loop level of ``users`` users with one e2e (vllm_stress.analysis.synthetic), as a probe's run folder."""
    (level,) = step_levels([users], hold_s=50.0)
    rows = closed_loop_rows(users, level[1], level[3], e2e_s, completion_tokens=100)
    if lag_s is not None:
        rows["schedule_lag_s"] = lag_s
    return write_run(folder, rows, [level], meta={"complete": True})


def test_repeats_are_judged_on_their_mean_with_its_ci(tmp_path):
    runs = [synthetic_probe(tmp_path / f"run-{k}", e2e) for k, e2e in enumerate((5.0, 5.2, 5.4), 1)]
    space = Space("users", 1, 64, 0.1)
    (slo,) = parse_slos("e2e_p50=5300")
    probe = judge(runs, 5, 5, [slo], space)
    assert probe.passed and probe.runs == 3 and probe.values["e2e_p50"] == pytest.approx(5.2, abs=0.01)
    # Student t with 2 degrees of freedom: 4.3027 x 0.2 s / sqrt(3)
    assert probe.ci95["e2e_p50"] == pytest.approx(4.3027 * 0.2 / 3**0.5, rel=0.05)
    (tight,) = parse_slos("e2e_p50=5100")
    above = judge(runs, 5, 5, [tight], space)
    assert not above.passed and above.missed == ["e2e_p50"] and above.reason.startswith("misses e2e_p50")
    bind = binding([tight], probe, above)
    assert bind["slo"] == "e2e_p50" and bind["above_ci95"] == pytest.approx(probe.ci95["e2e_p50"])


def test_an_open_loop_probe_whose_client_fell_behind_fails(tmp_path):
    space = Space("rate", 1.0, 64.0, 0.1, pool_seconds=2.5)
    assert (
        space.users_for(2.0) == 5
        and space.folder(2.0) == "rate-2"
        and space.locust_args(2.0) == ["--levels=5", "--arrival-rate=2"]
    )
    (slo,) = parse_slos("e2e_p50=6s")
    behind = judge([synthetic_probe(tmp_path / "late", 5.0, lag_s=2.0)], 2.0, 5, [slo], space)
    assert not behind.passed and "could not keep up" in behind.reason and "--pool-seconds" in behind.reason
    on_time = judge([synthetic_probe(tmp_path / "on-time", 5.0, lag_s=0.0)], 2.0, 5, [slo], space)
    assert on_time.passed


def test_rates_bracket_then_bisect_to_the_precision():
    class P:
        def __init__(self, passed):
            self.passed = passed

    probes, steps, space = {}, [], Space("rate", 2.0, 512.0, 0.1)
    while (rate := next_load(probes, space)) is not None:
        steps.append(rate)
        probes[rate] = P(rate <= 37.5)
    assert steps[:6] == [2.0, 4.0, 8.0, 16.0, 32.0, 64.0] and steps[6] == 48.0
    best = max(r for r, p in probes.items() if p.passed)
    worst = min(r for r, p in probes.items() if not p.passed and r > best)
    assert best <= 37.5 < worst and worst - best <= 0.1 * best


def test_bad_search_input_is_one_line_and_exit_2(tmp_path, capsys):
    for args, message in (
        (["--over", "users", "--low", "1.5"], "whole users"),
        (["--over", "rate", "--low", "0"], "0 < low <= high"),
        (["--repeats", "0"], "--repeats"),
        (["--web-port", "70000"], "--web-port"),
    ):
        code = main(["search", "--scenario", "smoke", "--slo", "e2e_p50=300", "--out", str(tmp_path / "s"), *args])
        err = capsys.readouterr().err
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_a_search_is_watched_in_the_web_ui(scenarios, tmp_path):
    """With --web-port each probe's master serves Locust's web UI there while it runs, and the live dashboard's
    progress line says which probe it is (--run-label before every phase)."""
    port, notes = free_port(), []

    def watch():
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not notes:
            try:
                note = requests.get(f"http://127.0.0.1:{port}/llm/series.json", timeout=2).json().get("phase")
                notes.extend([note] if note else [])
            except (requests.RequestException, ValueError):
                pass
            time.sleep(0.5)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    assert (
        scenarios(
            [
                "search",
                "--scenario",
                "smoke",
                "--slo",
                "e2e_p50=10s",
                "--low",
                "2",
                "--high",
                "2",
                "--web-port",
                str(port),
                "--out",
                str(tmp_path / "search"),
                "--workers",
                "1",
            ]
        )
        == 0
    )
    watcher.join(timeout=5)
    assert notes and notes[0].startswith(
        "SLO search probe 1 of at most 12: 2 users, run 1 of 1; no verdict yet · Level 1/1 (2 users): "
    )
    assert json.loads((tmp_path / "search" / "search.json").read_text())["answer"] == 2
