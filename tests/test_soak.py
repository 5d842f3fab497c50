"""A soak (``--shape soak:HOURS``): the drift rule on constructed windows (vllm_stress.core.drift), and a short soak
against the simulator that leaks (--leak-step-ms-per-min, --leak-mb-per-min): the report names the drift the server's
own request log and metrics show, and the same soak against a server that does not leak says no drift."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers import SHORT, SLOW_SIM
from vllm_stress.analysis.cli import main as analysis_main
from vllm_stress.core import schema
from vllm_stress.core.drift import DRIFT_RULES, SOAK_WINDOWS, drift, verdict
from vllm_stress.simulator.engine.leak import Leak

HOURS = np.linspace(0.05, 0.95, SOAK_WINDOWS)  # window middles of a one-hour soak
NOISE = np.array([1, -1, 0.5, -0.5, 0, 1, -1, 0.5, -0.5, 0])  # scatter around the line, flat on average


def judged(metric: str, values: np.ndarray) -> tuple[bool, str]:
    rule = DRIFT_RULES[metric]
    result = drift(rule, HOURS, values)
    return result.drifted, verdict(rule, result, "MiB" if metric.endswith("rss_mib") else "")


def test_a_latency_growing_18_percent_an_hour_drifts_and_a_flat_one_does_not():
    growing = 1.0 * (1 + 0.18 * (HOURS - 0.5)) + 0.005 * NOISE  # mean 1 s, +0.18 s per hour
    assert judged("ttft_p99_s", growing) == (True, "TTFT p99 grew 18 % per hour")
    assert judged("ttft_p99_s", 1.0 + 0.005 * NOISE) == (False, "TTFT p99: no drift")


def test_a_steep_slope_within_the_scatter_is_no_drift():
    # 20 % per hour on paper, but each window scatters by 30 %: the slope is not clear of its standard error
    assert judged("e2e_p50_s", 1.0 + 0.2 * (HOURS - 0.5) + 0.3 * NOISE) == (False, "e2e p50: no drift")


def test_falling_throughput_drifts_and_rising_throughput_does_not():
    assert judged("output_tokens_per_s", 1000 * (1 - 0.3 * (HOURS - 0.5)) + NOISE)[0]
    assert not judged("output_tokens_per_s", 1000 * (1 + 0.3 * (HOURS - 0.5)) + NOISE)[0]


def test_memory_drift_is_said_in_gib_per_hour_and_small_changes_are_under_the_floor():
    assert judged("server_rss_mib", 4096 + 2048 * HOURS + NOISE) == (True, "server RSS +2.0 GiB/h")
    assert judged("client_rss_mib", 300 + 400 * HOURS + NOISE) == (True, "client RSS +400 MiB/h")
    # 1 GiB per hour, but a 36 s soak: 10 MiB over the whole run, under the 32 MiB floor
    short = HOURS / 100
    assert not drift(DRIFT_RULES["server_rss_mib"], short, 4096 + 1024 * short + 0.01 * NOISE).drifted


def test_a_failure_share_creeping_up_drifts_and_empty_windows_are_left_out():
    shares = 0.02 * HOURS + 0.0001 * NOISE
    assert judged("failure_share", shares) == (True, "failure share +2.0 points per hour")
    shares[[2, 5]] = np.nan  # windows without a request
    assert judged("failure_share", shares)[0]
    assert not drift(DRIFT_RULES["failure_share"], HOURS[:2], shares[:2]).drifted  # two points: no line


def test_the_simulators_leak_grows_with_its_engine_clock():
    leak = Leak(step_ms_per_min=60, mb_per_min=2)
    assert leak.step_s(100.0) == 0 and not leak.held  # its first step: the origin
    assert leak.step_s(130.0) == pytest.approx(0.03) and len(leak.held) == 1  # half a minute: 30 ms, 1 MiB
    assert leak.step_s(220.0) == pytest.approx(0.12) and sum(map(len, leak.held)) == 4 * 2**20


SOAK = "soak:0.003"  # 10.8 s: 1 s of warm-up, then the hold cut into ten windows of about 1 s
LEAK = ["--leak-step-ms-per-min", "300", "--leak-mb-per-min", "600"]  # +5 ms per step each second, 10 MiB a second


def start_soak(simulator, folder, *leak: str) -> tuple[list[str], Path]:
    """A simulator (with ``leak``) logging its requests into ``folder``, and the Locust arguments of a soak of 4 users
    against it."""
    folder.mkdir()
    sim = simulator(*SLOW_SIM, "--request-log", str(folder / "requests.jsonl"), *leak)
    args = ["-f", "locustfiles/chat.py,scenarios/shape.py", "-H", sim.url, *SHORT, "--shape", SOAK, "--levels", "4"]
    args += ["--warmup", "1", "--ramp-time", "0.5", "--server-metrics-interval", "0.5"]
    return [*args, "--results-dir", str(folder / "run")], folder


def soak_record(folder: Path) -> tuple[dict, pd.DataFrame, np.ndarray]:
    """The analysis's soak record of the run in ``folder``, the server's request log of its chat requests (by
    arrival) and the resident memory (MiB) of its scrapes."""
    assert analysis_main([str(folder / "run"), "--out", str(folder / "report")]) == 0
    [soak] = json.loads((folder / "report" / schema.SUMMARY_JSON).read_text())["soak"]
    assert list((folder / "report").glob("soak_*.png")), "no drift plot"
    served = pd.read_json(folder / "requests.jsonl", lines=True).sort_values("arrival")
    scrapes = pd.read_csv(folder / "run" / schema.SERVER_METRICS_FILE)
    return soak, served[served["path"].str.contains("chat")], scrapes["resident_memory"].dropna().to_numpy() / 2**20


def test_a_leaking_server_drifts_and_a_sound_one_does_not(simulator, run_locust, tmp_path, figures):
    runs = [start_soak(simulator, tmp_path / "leak", *LEAK), start_soak(simulator, tmp_path / "sound")]
    with ThreadPoolExecutor(2) as pool:  # the two soaks side by side: one test's time
        for proc in pool.map(lambda run: run_locust(*run[0], timeout=60), runs):
            assert proc.returncode == 0, proc.stderr[-3000:]
    leaking, served, memory = soak_record(tmp_path / "leak")
    assert leaking["users"] == 4 and len(leaking["windows"]) == SOAK_WINDOWS
    # the server's own record: its requests took longer as the run went on, and its memory grew
    half = len(served) // 2
    e2e = (served["end"] - served["arrival"]).to_numpy(float)
    assert np.median(e2e[half:]) > 1.5 * np.median(e2e[:half]), e2e
    assert memory[-1] - memory[0] > 50, memory
    # the report: e2e p50 grew by far more than its 10 % an hour limit, the server's RSS by far more than 256 MiB/h
    e2e_drift, rss_drift = leaking["drift"]["e2e_p50_s"], leaking["drift"]["server_rss_mib"]
    assert e2e_drift["drifted"] and e2e_drift["relative_per_h"] > 10, e2e_drift
    assert e2e_drift["verdict"].startswith("e2e p50 grew")
    assert rss_drift["drifted"] and rss_drift["slope_per_h"] > 5 * 1024, rss_drift  # ~35 GiB/h asked
    assert "GiB/h" in rss_drift["verdict"]
    sound, _served, memory = soak_record(tmp_path / "sound")
    assert memory[-1] - memory[0] < 20, memory  # the server held its memory
    assert sound["drift"]["server_rss_mib"]["verdict"] == "server RSS: no drift", sound["drift"]["server_rss_mib"]
    # its pace held too: the e2e p50's change over the soak a small part of the leaking server's
    assert sound["drift"]["e2e_p50_s"]["change"] < e2e_drift["change"] / 4, (sound["drift"], e2e_drift)


@pytest.mark.parametrize("metric", list(DRIFT_RULES))
def test_every_drift_rule_says_no_drift_for_a_flat_metric(metric):
    assert judged(metric, 100 + 0.01 * NOISE) == (False, f"{DRIFT_RULES[metric].label}: no drift")
