"""The SLO search against the simulator with --max-num-seqs 32: the same answer as a dense sweep read by hand, in
fewer probes; the same search over arrival rate (open loop); a search watched in the web UI; bad input refused in one
line. e2e p50 is the SLO: it grows with the load at every level (TTFT of this tiny profile comes in waves). The
search's modules have unit tests of their own (tests/test_search_*.py)."""

import json
import math
import threading
import time

import pytest
import requests

from vllm_stress.scenarios.cli import main
from vllm_stress.scenarios.run.runner import free_port

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
