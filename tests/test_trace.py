"""Trace replay of the bundled Mooncake-format trace on a master with two workers: every trace line is one row, sent
on schedule when the users can carry it; sped up past what they can carry, the report flags the lag."""

import json

import pytest

from benchmarks.harness import read_rows, two_workers
from tests.helpers import REPO
from vllm_stress.analysis.cli import main as analyse
from vllm_stress.client.trace import read_trace, select

MOONCAKE = REPO / "scenarios" / "data" / "mooncake-sample.jsonl"
AZURE = REPO / "scenarios" / "data" / "azure-sample.csv"
ARGS = ["--headless", "--only-summary", "--stop-timeout", "30", "-L", "INFO"]


def test_both_published_formats_are_read():
    mooncake, azure = read_trace(str(MOONCAKE)), read_trace(str(AZURE))
    assert len(mooncake) == len(azure) == 240 and mooncake[0].at_s == azure[0].at_s == 0
    assert mooncake[1].hash_ids and not azure[1].hash_ids
    window = select(mooncake, 10, 20, speedup=4)
    assert all(0 <= line.at_s < 5 for line in window) and len(window) == sum(10 <= x.at_s < 30 for x in mooncake)


def replay(simulator, run_locust, tmp_path, name, users, speedup, duration):
    sim = simulator("--profile", "cpu-tiny")
    out = tmp_path / name
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "-u",
        str(users),
        "-r",
        str(users),
        "-t",
        f"{duration / speedup + 8:.0f}s",
        "--trace",
        str(MOONCAKE),
        "--speedup",
        str(speedup),
        "--trace-duration",
        str(duration),
        "--results-dir",
        str(out),
        *two_workers(),
        *ARGS,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert main_report(out) == 0
    rows = read_rows(out / "requests.csv")
    summary = json.loads((out / "report" / "summary.json").read_text())
    windows = summary["traffic"][0]["windows"]  # vllm_stress/analysis/traffic.py: per 10 s of the replay
    assert sum(w["requests"] for w in windows) == len(rows) - sum(r["error"] == "Aborted" for r in rows)
    return rows, summary["levels"][0] | {"windows": windows}


def main_report(out):
    return analyse([str(out), "--out", str(out / "report")])


@pytest.mark.parametrize("speedup", [1, 4])
def test_every_line_is_one_row_on_schedule(simulator, run_locust, tmp_path, speedup):
    duration = 20 * speedup  # 20 s of replay either way
    lines = select(read_trace(str(MOONCAKE)), 0, duration, speedup)
    rows, level = replay(simulator, run_locust, tmp_path, f"x{speedup}", users=40, speedup=speedup, duration=duration)
    assert len(rows) == len(lines)  # one row per trace line, over both workers
    assert len({r["worker"] for r in rows}) == 2
    assert sorted(int(r["target_prompt_tokens"]) for r in rows) == sorted(line.input_tokens for line in lines)
    assert all(r["count_mismatch"] == "0" for r in rows if r["ok"] == "1")  # exact lengths, as traced
    assert level["schedule_lag_p99_s"] < 0.5 and "keep up" not in level["bound"]
    assert not any(w["behind"] for w in level["windows"])


def test_a_replay_the_client_cannot_carry_is_flagged(simulator, run_locust, tmp_path):
    rows, level = replay(simulator, run_locust, tmp_path, "too-fast", users=2, speedup=8, duration=40)
    assert level["schedule_lag_p99_s"] > 1.0 and "did not keep up with the schedule" in level["bound"]
    assert level["windows"][-1]["behind"]  # the window where the backlog built up is flagged
