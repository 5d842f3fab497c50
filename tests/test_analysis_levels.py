"""Per-level windows and statistics on small synthetic runs with hand-checked answers."""

import numpy as np
import pandas as pd
import pytest

from analysis.levels import goodput, level_stats, level_windows, timeline
from analysis.load import load_run
from analysis.synthetic import request_rows, write_run

T0 = 1_700_000_000.0
# Level 10 holds [T0+1000, T0+1099): 99 s. Level 20 holds [T0+1110, T0+1209).
LEVELS = [(10, T0 + 990, T0 + 1000, T0 + 1099), (20, T0 + 1099, T0 + 1110, T0 + 1209)]


def level_10_rows() -> pd.DataFrame:
    """99 successes ending at T0+1000 .. T0+1098 (e2e 1..99 s, 1000+100 tokens), one failure in the window, and
    two huge requests outside it (one ends during the ramp, one after hold_end) that must not count."""
    inside = request_rows(10, T0 + 1000 + np.arange(99), np.arange(1, 100), prompt_tokens=1000, completion_tokens=100)
    failure = request_rows(10, [T0 + 1098.5], 5.0, ok=0)
    outside = request_rows(10, [T0 + 999.9, T0 + 1099.0], 3.0, prompt_tokens=10**6, completion_tokens=10**6)
    return pd.concat([inside, failure, outside], ignore_index=True)


def level_20_rows() -> pd.DataFrame:
    """198 successes of 100 output tokens ending every 0.5 s from T0+1110, e2e 4 s."""
    return request_rows(20, T0 + 1110 + 0.5 * np.arange(198), 4.0, prompt_tokens=1000, completion_tokens=100)


@pytest.fixture
def run_dir(tmp_path):
    rows = pd.concat([level_10_rows(), level_20_rows()], ignore_index=True)
    itl = [(10, 10.0, 50), (10, 20.0, 40), (10, 100.0, 10)]
    return write_run(tmp_path / "run", rows, LEVELS, itl=itl, meta={"model": "m", "complete": True})


def stats_of(folder, slo=None) -> pd.DataFrame:
    run = load_run(folder)
    windows, partial = level_windows(run)
    assert not partial
    return level_stats(run, windows, slo).set_index("users")


def test_window_counts_only_requests_ending_inside_the_hold(run_dir):
    level = stats_of(run_dir).loc[10]
    assert level["window_s"] == 99
    assert level["requests"] == 100 and level["failures"] == 1
    assert level["success_rate"] == pytest.approx(0.99)
    assert level["requests_per_s"] == pytest.approx(1.0)
    assert level["output_tokens_per_s"] == pytest.approx(100.0)  # 99 x 100 tokens / 99 s
    assert level["total_tokens_per_s"] == pytest.approx(1100.0)


def test_latency_percentiles_interpolate_linearly(run_dir):
    level = stats_of(run_dir).loc[10]
    # e2e 1..99: p50 = 50, p90 = 1 + 0.9 * 98, p99 = 1 + 0.99 * 98; TTFT is a tenth of e2e.
    assert level[["e2e_p50_s", "e2e_p90_s", "e2e_p99_s"]].tolist() == pytest.approx([50.0, 89.2, 98.02], abs=1e-5)
    assert level["ttft_p99_s"] == pytest.approx(9.802, abs=1e-5)
    assert level["tpot_p50_s"] == pytest.approx(50 * 0.9 / 99, abs=1e-5)


def test_itl_percentiles_from_histogram(run_dir):
    level = stats_of(run_dir).loc[10]
    assert level[["itl_p50_s", "itl_p90_s", "itl_p99_s"]].tolist() == pytest.approx([0.010, 0.020, 0.100])
    assert np.isnan(stats_of(run_dir).loc[20, "itl_p50_s"])


def test_second_level_and_concurrency(run_dir):
    stats = stats_of(run_dir)
    assert stats.loc[20, "output_tokens_per_s"] == pytest.approx(198 * 100 / 99)
    # Level 20: a 4 s request ends every 0.5 s, so 8 are in flight once the first 4 s of the window have passed.
    assert stats.loc[20, "concurrency_mean"] == pytest.approx(8.0, abs=0.2)


def test_goodput_against_e2e_slo(run_dir):
    level = stats_of(run_dir, slo={"e2e": 50.0}).loc[10]
    assert level["goodput_ratio"] == pytest.approx(50 / 100)  # e2e 1..50 of 100 requests (the failure never counts)
    assert level["goodput_requests_per_s"] == pytest.approx(50 / 99)


def test_goodput_treats_missing_tpot_as_met_and_missing_ttft_as_missed():
    ended = pd.DataFrame(
        {
            "users": [1, 1, 1, 1],
            "ok": [True, True, True, False],
            "ttft_s": [0.5, np.nan, 0.5, 0.1],
            "tpot_s": [np.nan, 0.01, 0.2, 0.01],
            "e2e_s": [1.0, 1.0, 1.0, 1.0],
        }
    )
    result = goodput(ended, {"ttft": 1.0, "tpot": 0.05}, pd.Series([2.0], index=[1]), pd.Series([4], index=[1]))
    assert result.loc[1].tolist() == [0.5, 0.25]  # only the first request is good


def test_rows_from_several_workers_in_any_order_give_the_same_answer(run_dir, tmp_path):
    rows = pd.read_csv(run_dir / "requests.csv").sample(frac=1.0, random_state=7)
    rows["worker"] = np.where(np.arange(len(rows)) % 3 == 0, "host_1", "host_2")
    merged = write_run(tmp_path / "merged", rows, LEVELS, itl=[(10, 10.0, 50), (10, 20.0, 40), (10, 100.0, 10)])
    pd.testing.assert_frame_equal(stats_of(merged), stats_of(run_dir))
    assert stats_of(merged).loc[10, "output_tokens_per_s"] == pytest.approx(100.0)


def test_windows_derived_from_rows_without_levels_csv(tmp_path):
    # 100 requests start at T0 .. T0+99, each 10 s: window = [T0 + median e2e, last start) = [T0+10, T0+99).
    rows = request_rows(10, T0 + 10 + np.arange(100), 10.0, completion_tokens=100)
    stats = stats_of(write_run(tmp_path / "plain", rows))
    assert stats.loc[10, "window_s"] == pytest.approx(89.0)
    assert stats.loc[10, "requests"] == 89  # ends T0+10 .. T0+98
    assert stats.loc[10, "output_tokens_per_s"] == pytest.approx(100.0)


def test_interrupted_run_is_cut_at_its_last_row(tmp_path):
    levels = [*LEVELS, (40, T0 + 1209, T0 + 1220, T0 + 1320)]
    rows = pd.concat([level_10_rows(), level_20_rows().iloc[:100]], ignore_index=True)  # level 20 stops at +49.5 s
    run = load_run(write_run(tmp_path / "cut", rows, levels, meta={"complete": True}))
    windows, partial = level_windows(run)
    assert partial  # rows end long before level 40's hold_end even though run.json says complete
    assert windows["users"].tolist() == [10, 20]  # level 40 was never reached
    assert windows["partial"].tolist() == [False, True]
    assert windows["end"].iloc[-1] == pytest.approx(T0 + 1110 + 49.5)
    stats = level_stats(run, windows).set_index("users")
    assert stats.loc[20, "partial"] and not stats.loc[10, "partial"]


def test_level_killed_before_its_levels_row_gets_a_derived_window(tmp_path):
    rows = pd.concat([level_10_rows(), level_20_rows()], ignore_index=True)
    run = load_run(write_run(tmp_path / "killed", rows, LEVELS[:1]))  # level 20 never got its levels.csv row
    windows, partial = level_windows(run)
    assert partial and windows["partial"].tolist() == [False, True]
    # level 20 rows start T0+1106 .. T0+1204.5 (e2e 4 s): window [first start + 4 s, last start)
    assert windows[["start", "end"]].iloc[1].tolist() == pytest.approx([T0 + 1110, T0 + 1204.5])
    assert level_stats(run, windows).set_index("users").loc[20, "requests"] == 189  # ends T0+1110 .. T0+1204


def test_header_only_levels_csv_means_a_plain_locust_run(tmp_path):
    rows = request_rows(10, T0 + 10 + np.arange(100), 10.0, completion_tokens=100)
    folder = write_run(tmp_path / "plain", rows, levels=[])
    assert stats_of(folder).loc[10, "window_s"] == pytest.approx(89.0)


def test_run_json_complete_false_marks_partial(run_dir):
    (run_dir / "run.json").write_text('{"complete": false}')
    assert level_windows(load_run(run_dir))[1]


def test_timeline_counts_per_second():
    rows = request_rows(1, T0 + np.array([2.5, 2.7, 4.1]), [2.0, 1.0, 3.0], completion_tokens=10)
    rows.loc[1, "ok"] = 0
    rows["ok"] = rows["ok"].astype(bool)
    seconds = timeline(rows)
    assert seconds["in_flight"].tolist() == [1, 3, 1, 1, 0]
    assert seconds["failed"].tolist() == [0, 0, 1, 0, 0]
    assert seconds["output_tokens"].tolist() == [0, 0, 10, 0, 10]
