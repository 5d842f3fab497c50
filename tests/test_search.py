"""The SLO search against the simulator with --max-num-seqs 32. Over users: the search's answer is what a dense sweep
gives, in fewer probes, proven on the simulator's engine in virtual time (vllm_stress.simulator.engine.virtual: each probe's
requests take the engine's e2e at its concurrency), then one short real search, watched in the web UI, whose bracket
is what its own probes measured. The same search over arrival rate (open loop, against --max-num-seqs 8: fewer
requests at the same load relative to its capacity); bad input refused in one line. e2e p50 is the SLO: it grows with
the load at every level (TTFT of this tiny profile comes in waves). The search's modules have unit tests of their own
(tests/test_search_*.py)."""

import functools
import json
import math
import threading
import time

import pytest
import requests

from tests.helpers import NOWHERE, analyse
from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.scenarios.cli import main
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.scenarios.search.judge import parse_slos
from vllm_stress.scenarios.search.run import Probing, search
from vllm_stress.simulator.engine.virtual import closed_loop
from vllm_stress.simulator.model.profiles import load_profile

SIM = ["--simulator-arg=--max-num-seqs=32", "--workers", "1"]
SLO_MS = 340


@functools.cache
def virtual_e2e_s(users: int) -> float:
    """The e2e of a request of the smoke scenario (128 + 32 tokens) at ``users`` concurrent users, on the simulator's
    engine (cpu-tiny, --max-num-seqs 32, no jitter) in virtual time: what the simulator of SIM serves, without HTTP."""
    profile = load_profile("cpu-tiny", {"max_num_seqs": 32, "jitter": 0.0})
    return closed_loop(profile, users, 128, 32, requests=4 * users).e2e_mean


def test_search_finds_what_a_dense_sweep_finds(tmp_path, monkeypatch):
    """The search command's own probe loop, judge and write-up, each probe's run written as its users would see the
    engine (every request taking virtual_e2e_s): the answer is the last passing level of a sweep of every user count
    from --low to --high, found in far fewer probes; resumed, it re-judges the probes on disk and runs none."""
    runs = []

    def run(self, space, load, run_dir, label):
        runs.append(load)
        (level,) = step_levels([int(load)], hold_s=10.0)
        rows = closed_loop_rows(int(load), level[1], level[3], virtual_e2e_s(int(load)), completion_tokens=32)
        write_run(run_dir, rows, [level], meta={"complete": True})

    monkeypatch.setattr(Probing, "run", run)
    slo_s = SLO_MS / 1000
    dense = [users for users in range(8, 65) if virtual_e2e_s(users) <= slo_s]
    by_hand = max(dense)
    assert dense == list(range(8, by_hand + 1)) and 8 < by_hand < 64  # e2e grows with the load: one boundary

    def searched() -> dict:
        return search("smoke", tmp_path / "search", parse_slos(f"e2e_p50={SLO_MS}"), target=NOWHERE, low=8, high=64,
                      precision=0.01)  # fmt: skip

    result = searched()
    assert result["finished"] and result["answer_users"] == by_hand and result["next_failing"] == by_hand + 1
    assert result["failing_reason"].startswith("misses e2e_p50") and result["binding"]["slo"] == "e2e_p50"
    assert len(result["probes"]) == len(runs) < len(range(8, 65)) / 5
    for probe in result["probes"]:  # each verdict is the engine's e2e against the SLO
        assert probe["passed"] == (probe["load"] <= by_hand), probe
        assert probe["values"]["e2e_p50"] == pytest.approx(virtual_e2e_s(int(probe["load"])), abs=1e-6)
    runs.clear()
    again = searched()
    assert runs == [] and again["answer_users"] == by_hand and len(again["probes"]) == len(result["probes"])


def test_search_over_arrival_rate(scenarios, tmp_path):
    """The open loop: each probe sends at its rate with ceil(rate x 1.5 s) users, and a passing probe did send at its
    rate. Above the server's capacity e2e grows without bound (or the pool runs dry), so a probe there fails. Two
    probes, against --max-num-seqs 8 (about 65 req/s, e2e p50 about 0.1 s below it): 48 req/s (0.75x) passes, 90 req/s
    (1.4x, e2e p50 2 s) fails, and the bracket is then within --precision 0.9, so the search stops. --max-step-time
    bounds the hold of the failing probe, which need not be steady to fail; a passing one is steady at one of the checks
    (every 5 s) in its 12 s, or at its end."""
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
                "48",
                "--high",
                "90",
                "--precision",
                "0.9",
                "--pool-seconds",
                "1.5",
                "--out",
                str(tmp_path / "rate"),
                "--locust-arg=--max-step-time=12",
                "--simulator-arg=--max-num-seqs=8",
                "--workers",
                "1",
            ]
        )
        == 0
    )
    result = json.loads((tmp_path / "rate" / "search.json").read_text())
    assert result["finished"] and result["over"] == "rate" and len(result["probes"]) == 2, result["probes"]
    assert (result["answer"], result["next_failing"]) == (48, 90)  # 90 - 48 <= 0.9 x 48: no bisection needed
    for probe in result["probes"]:
        assert probe["users"] == math.ceil(probe["load"] * 1.5)
        if probe["passed"]:  # Poisson arrivals over a steady window of a few hundred requests
            assert probe["values"]["requests_per_s"] == pytest.approx(probe["load"], rel=0.25), probe
    assert "Arrival wait p99" in (tmp_path / "rate" / "search.md").read_text()


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


def summary_level(run_dir, users: int) -> dict:
    """The report's level of ``users`` in a run folder (python -m analysis, its summary.json)."""
    levels = analyse(run_dir, run_dir.parent / "report")["levels"]
    return next(level for level in levels if level["users"] == users)


def test_a_short_real_search_is_watched_in_the_web_ui(scenarios, tmp_path):
    """A real search between 25 and 48 users at a coarse precision (two probes: 25 users pass with e2e about 0.25 s,
    48 fail with about 0.44 s, and 48 - 25 <= 0.95 x 25 ends the search): each probe's master serves Locust's web UI
    at --web-port while it runs, and the live dashboard's progress line says which probe it is (--run-label before
    every phase). Its verdicts are what its probes measured, and resumed it runs none."""
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
    search_args = ["search", "--scenario", "smoke", "--slo", f"e2e_p50={SLO_MS}", "--low", "25", "--high", "48"]
    search_args += ["--precision", "0.95", "--out", str(tmp_path / "search"), *SIM]
    assert scenarios([*search_args, "--web-port", str(port)]) == 0
    watcher.join(timeout=5)
    assert notes and notes[0].startswith(
        "SLO search probe 1 of at most 12: 25 users, run 1 of 1; no verdict yet · Level 1/1 (25 users): "
    )
    result = json.loads((tmp_path / "search" / "search.json").read_text())
    assert result["finished"] and len(result["probes"]) == 2, result["probes"]
    for probe in result["probes"]:  # the e2e p50 each probe's own rows measured decides it
        measured = summary_level(tmp_path / "search" / f"probe-{int(probe['load'])}" / "run-1", probe["users"])
        assert probe["values"]["e2e_p50"] == pytest.approx(measured["e2e_p50_s"])
        assert probe["passed"] == (measured["steady"] and measured["e2e_p50_s"] * 1000 <= SLO_MS), (probe, measured)
    passed = [probe["load"] for probe in result["probes"] if probe["passed"]]
    failed = [probe["load"] for probe in result["probes"] if not probe["passed"]]
    assert result["answer"] == max(passed, default=None)
    assert result["next_failing"] == min((load for load in failed if load > max(passed, default=0)), default=None)
    assert scenarios(search_args) == 0  # resumed: the probes on disk are judged again, none is run
    again = json.loads((tmp_path / "search" / "search.json").read_text())
    assert again["answer"] == result["answer"] and again["probes"] == result["probes"]
