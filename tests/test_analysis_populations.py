"""Which requests count for what: aborted streams, levels never held, off-target answers, runs without usage, SLO
units and what the server held — each on a synthetic run with a hand-checked answer."""

import json

import numpy as np
import pandas as pd
import pytest

from vllm_stress.analysis.cli import main, parse_slo
from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.io.synthetic import closed_loop_rows, request_rows, step_levels, write_run
from vllm_stress.analysis.levels import level_stats, level_windows
from vllm_stress.core.schema import ABORTED, SERVER_METRICS_COLUMNS, SERVER_METRICS_FILE

T0 = 1.7e9
LEVELS = step_levels([10, 20], hold_s=100.0, ramp_s=10.0, t0=T0)  # holds [T0+10, T0+110) and [T0+120, T0+220)


def two_levels(level_20_e2e=2.0, **level_20) -> pd.DataFrame:
    """Closed loops of 2 s requests: 10 users through the first level, 20 through the second."""
    return pd.concat(
        [closed_loop_rows(10, T0, T0 + 110, 2.0), closed_loop_rows(20, T0 + 110, T0 + 220, level_20_e2e, **level_20)],
        ignore_index=True,
    )


def aborted_rows(users: int, end: float, count: int) -> pd.DataFrame:
    rows = request_rows(users, [end] * count, 1.0, ok=0)
    rows["error"] = ABORTED
    rows["chunks"] = 40  # what they streamed before the stop
    return rows


def analysed(folder, *args) -> dict:
    assert main([str(folder), "--out", str(folder / "out"), *args]) == 0
    return json.loads((folder / "out" / "summary.json").read_text())


def by_users(summary: dict) -> dict[int, dict]:
    return {level["users"]: level for level in summary["levels"]}


def test_streams_aborted_by_an_interrupted_run_are_not_failures(tmp_path):
    """Ctrl-C at T0+150 during level 20's hold: 20 streams were cut, the run is partial; none of them failed."""
    rows = pd.concat([two_levels(), aborted_rows(20, T0 + 149.5, 20)], ignore_index=True)
    rows = rows[rows["end_time"] <= T0 + 150]
    folder = write_run(
        tmp_path / "run", rows, LEVELS[:1] + [(20, T0 + 110, T0 + 120, T0 + 150)], meta={"complete": False}
    )
    summary = analysed(folder)
    level = by_users(summary)[20]
    assert level["failures"] == 0 and level["aborted"] == 20 and level["success_rate"] == 1.0
    assert summary["errors"] == {} and summary["aborted"] == 20
    assert level["output_tokens_per_s"] > 0  # what the aborted streams received still streamed
    report = (folder / "out" / "report.md").read_text()
    assert "not failures: 20 streams aborted because the run stopped its users" in report


def test_a_level_interrupted_during_its_ramp_is_never_the_peak(tmp_path):
    """The run stopped during level 20's warm-up (levels.csv gives it no hold): its rows, twice level 10's throughput,
    are shown as never held and the peak stays at 10."""
    rows = two_levels()
    rows = rows[rows["end_time"] < T0 + 118]
    folder = write_run(
        tmp_path / "run", rows, LEVELS[:1] + [(20, T0 + 110, T0 + 118, T0 + 118)], meta={"complete": False}
    )
    summary = analysed(folder)
    level = by_users(summary)[20]
    assert not level["steady"] and level["partial"]
    assert level["steady_reason"] == "the run stopped during this level's ramp or warm-up: it was never held"
    assert summary["peak"]["users"] == 10 and summary["saturation_users"] == 10 and summary["unsteady_levels"] == [20]


def test_off_target_answers_are_counted_but_not_timed(tmp_path):
    """Level 20's every fifth request came back with 100 of its 512 tokens in a fifth of the time (the server cut it
    short): it is counted as off target and left out of the latency percentiles."""
    completion = np.array([512, 512, 512, 512, 100])
    rows = two_levels(np.array([2.0, 2.0, 2.0, 2.0, 0.4]), completion_tokens=completion)
    rows.loc[rows["completion_tokens"] == 100, ["count_mismatch", "finish_reason"]] = [1, "abort"]
    run = load_run(write_run(tmp_path / "run", rows, LEVELS))
    windows, _ = level_windows(run)
    level = level_stats(run, windows).set_index("users").loc[20]
    assert level["off_target"] > 0 and level["failures"] == 0
    assert level["e2e_p50_s"] == pytest.approx(2.0) and level["ttft_p50_s"] == pytest.approx(0.2)  # none of 0.4 s


def test_a_run_without_usage_reports_no_token_throughput(tmp_path):
    """A server that sends no usage (vLLM's legacy /generate): no tok/s, and the peak is in requests/s."""
    rows = two_levels()
    rows[["prompt_tokens", "completion_tokens"]] = np.nan
    summary = analysed(write_run(tmp_path / "run", rows, LEVELS))
    assert all(level["output_tokens_per_s"] is None for level in summary["levels"])
    assert summary["throughput_field"] == "requests_per_s" and summary["peak"]["users"] == 20
    assert summary["peak"]["requests_per_s"] == pytest.approx(10.0)  # 20 users / 2 s
    assert (
        "requests/s (no token counts: the server sent no usage)" in (tmp_path / "run" / "out" / "report.md").read_text()
    )


def test_bare_slo_numbers_are_milliseconds_as_in_vllm():
    assert parse_slo("ttft=500,tpot=50ms,e2e=2s") == {"ttft": 0.5, "tpot": 0.05, "e2e": 2.0}


def test_server_held_comes_from_the_servers_histograms_alone(tmp_path):
    """The server finished 100 requests every 10 s, 0.8 s each in its engine (0.2 s queued) and 1.9 s in its HTTP
    layer: its engine held 100 x 0.8 / 10 = 8, its HTTP layer 19 of the 20 users — whatever the client measured."""
    folder = write_run(tmp_path / "run", two_levels(), LEVELS)
    scrapes = np.arange(T0 + 120, T0 + 231, 10.0)
    server = pd.DataFrame({column: np.nan for column in SERVER_METRICS_COLUMNS}, index=range(len(scrapes)))
    server = server.assign(
        time=scrapes, users=20, e2e_count=100, e2e_sum_s=80.0, queue_sum_s=20.0, http_count=100, http_sum_s=190.0
    )
    server.to_csv(folder / SERVER_METRICS_FILE, index=False)
    level = by_users(analysed(folder))[20]
    assert level["server_in_system_mean"] == pytest.approx(8.0) and level["server_waiting_mean"] == pytest.approx(2.0)
    assert level["server_http_held_mean"] == pytest.approx(19.0)
    assert level["bound"] == "server-bound: waiting requests"  # 2 of 8 wait: a real queue
