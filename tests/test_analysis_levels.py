"""Per-level windows and statistics on small synthetic runs with hand-checked answers."""

import math

import numpy as np
import pandas as pd
import pytest

from vllm_stress.analysis.io.load import load_run
from vllm_stress.analysis.io.synthetic import closed_loop_rows, request_rows, write_run
from vllm_stress.analysis.levels import (
    goodput,
    latency_percentiles,
    level_stats,
    level_windows,
    timeline,
)
from vllm_stress.analysis.measures import tokens_in_windows
from vllm_stress.analysis.replicas import replica_levels
from vllm_stress.analysis.report.pipeline import windows_and_stats
from vllm_stress.core.schema import (
    CLIENT_HEALTH_COLUMNS,
    CLIENT_HEALTH_FILE,
    SERVER_METRICS_COLUMNS,
    SERVER_METRICS_FILE,
)

T0 = 1_700_000_000.0
# Level 10 ramps from T0+980 and holds [T0+1000, T0+1100): 100 s. Level 20 ramps from T0+1100, holds [T0+1120, T0+1220).
LEVELS = [(10, T0 + 980, T0 + 1000, T0 + 1100), (20, T0 + 1100, T0 + 1120, T0 + 1220)]


def level_10_rows() -> pd.DataFrame:
    """10 users in a closed loop from T0+980, each repeating a 5 s then a 15 s request (1000 + 100 tokens): the 100 s
    hold is 5 cycles of every user, so 50 requests of each latency end in it and the users stream 10 x 2 x 100 / 20
    = 100 tok/s. Plus one failure in the window and two huge requests that streamed nothing inside it: one ended
    during the ramp, one was sent in the window but got its first token only after hold_end (it queued)."""
    loop = closed_loop_rows(10, T0 + 980, T0 + 1100, [5.0, 15.0], prompt_tokens=1000, completion_tokens=100)
    failure = request_rows(10, [T0 + 1098.5], 5.0, ok=0)
    huge = {"prompt_tokens": 10**6, "completion_tokens": 10**6}
    ended_in_ramp = request_rows(10, [T0 + 999.9], 3.0, **huge)
    queued_past_end = request_rows(10, [T0 + 1105.0], 10.0, ttft_fraction=0.9, **huge)  # first token T0+1104
    return pd.concat([loop, failure, ended_in_ramp, queued_past_end], ignore_index=True)


def level_20_rows() -> pd.DataFrame:
    """20 users in a closed loop from T0+1100 to T0+1220, requests of 4 s (1000 + 100 tokens): 500 output tok/s."""
    return closed_loop_rows(20, T0 + 1100, T0 + 1220, 4.0, prompt_tokens=1000, completion_tokens=100)


@pytest.fixture
def run_dir(tmp_path):
    rows = pd.concat([level_10_rows(), level_20_rows()], ignore_index=True)
    itl = [(10, 10.0, 50), (10, 20.0, 40), (10, 100.0, 10)]
    return write_run(tmp_path / "run", rows, LEVELS, itl=itl, meta={"model": "m", "complete": True})


def stats_of(folder, slo=None) -> pd.DataFrame:
    _, stats, partial, _ = windows_and_stats(load_run(folder), slo)
    assert not partial
    return stats.set_index("users")


def test_requests_count_where_they_ended_and_tokens_where_they_streamed(run_dir):
    level = stats_of(run_dir).loc[10]
    assert level["window_s"] == 100
    assert level["requests"] == 101 and level["failures"] == 1  # 100 of the loop + the failure; not the huge two
    assert level["success_rate"] == pytest.approx(100 / 101)
    assert level["requests_per_s"] == pytest.approx(1.0)
    assert level["output_tokens_per_s"] == pytest.approx(100.0)  # the huge requests streamed outside the window
    assert level["total_tokens_per_s"] == pytest.approx(1100.0)  # 100 first tokens x 1000 prompt tokens / 100 s


def test_percentiles_come_from_the_requests_ended_in_the_window(run_dir):
    level = stats_of(run_dir).loc[10]
    # 50 requests of 5 s and 50 of 15 s: the median interpolates between the two; TTFT is a tenth of e2e.
    assert level[["e2e_p50_s", "e2e_p90_s", "e2e_p99_s"]].tolist() == pytest.approx([10.0, 15.0, 15.0], abs=1e-5)
    assert level["ttft_p99_s"] == pytest.approx(1.5, abs=1e-5)
    assert level["tpot_p50_s"] == pytest.approx(10 * 0.9 / 99, abs=1e-5)


def test_latency_percentiles_interpolate_linearly():
    good = request_rows(10, T0 + 1000 + np.arange(99), np.arange(1, 100), completion_tokens=100)
    level = latency_percentiles(good).loc[10]
    # e2e 1..99: p50 = 50, p90 = 1 + 0.9 * 98, p99 = 1 + 0.99 * 98; TTFT is a tenth of e2e.
    assert level[["e2e_p50_s", "e2e_p90_s", "e2e_p99_s"]].tolist() == pytest.approx([50.0, 89.2, 98.02])
    assert level["ttft_p99_s"] == pytest.approx(9.802)
    assert level["tpot_p50_s"] == pytest.approx(50 * 0.9 / 99)


def test_itl_percentiles_from_histogram(run_dir):
    level = stats_of(run_dir).loc[10]
    assert level[["itl_p50_s", "itl_p90_s", "itl_p99_s"]].tolist() == pytest.approx([0.010, 0.020, 0.100])
    assert np.isnan(stats_of(run_dir).loc[20, "itl_p50_s"])


def test_second_level_and_concurrency(run_dir):
    level = stats_of(run_dir).loc[20]
    # 20 users x 100 tokens / 4 s; a request ends every 0.2 s; level 10's last requests ended during this ramp.
    assert level[["output_tokens_per_s", "total_tokens_per_s"]].tolist() == pytest.approx([500.0, 5500.0])
    assert level["requests"] == 500 and level["requests_per_s"] == pytest.approx(5.0)
    assert level["concurrency_mean"] == pytest.approx(20.0)  # every user always has a request in flight


def test_goodput_against_e2e_slo(run_dir):
    level = stats_of(run_dir, slo={"e2e": 10.0}).loc[10]
    assert level["goodput_ratio"] == pytest.approx(50 / 101)  # the 5 s requests of 101 (the failure never counts)
    assert level["goodput_requests_per_s"] == pytest.approx(50 / 100)


def test_goodput_treats_missing_tpot_as_met_and_missing_ttft_as_missed():
    measured = pd.DataFrame(  # the measured requests of a level that had 4 requests (one failed)
        {
            "users": [1, 1, 1],
            "ttft_s": [0.5, np.nan, 0.5],
            "tpot_s": [np.nan, 0.01, 0.2],
            "e2e_s": [1.0, 1.0, 1.0],
        }
    )
    result = goodput(measured, {"ttft": 1.0, "tpot": 0.05}, pd.Series([2.0], index=[1]), pd.Series([4], index=[1]))
    assert result.loc[1].tolist() == [0.5, 0.25]  # only the first request is good


def test_rows_from_several_workers_in_any_order_give_the_same_answer(run_dir, tmp_path):
    rows = pd.read_csv(run_dir / "requests.csv").sample(frac=1.0, random_state=7)
    rows["worker"] = np.where(np.arange(len(rows)) % 3 == 0, "host_1", "host_2")
    merged = write_run(tmp_path / "merged", rows, LEVELS, itl=[(10, 10.0, 50), (10, 20.0, 40), (10, 100.0, 10)])
    pd.testing.assert_frame_equal(stats_of(merged), stats_of(run_dir))
    assert stats_of(merged).loc[10, "output_tokens_per_s"] == pytest.approx(100.0)


@pytest.mark.parametrize(("hold", "ended", "ended_tokens_per_s"), [((75, 105), 0, 0.0), ((105, 135), 8, 160.0)])
def test_requests_longer_than_the_window_count_what_streamed_inside(tmp_path, hold, ended, ended_tokens_per_s):
    # 8 users spawned together from T0, each sending back-to-back 60 s requests of 600 tokens that stream from the
    # start: the server produces 8 x 600 / 60 = 80 tok/s at every instant, but the requests all end together at
    # T0+60, T0+120 ..., so a 30 s window holds 0 or 8 ends. Counting the tokens of the requests that ended in it
    # would give 0 or 8 x 600 / 30 = 160 tok/s (twice the truth); what streamed inside gives 80 either way.
    rows = closed_loop_rows(8, T0, T0 + 135, 60.0, spread=0, ttft_fraction=0.0, completion_tokens=600)
    levels = [(8, T0, T0 + hold[0], T0 + hold[1])]
    level = stats_of(write_run(tmp_path / "run", rows, levels)).loc[8]
    assert level["window_s"] == 30 and level["requests"] == ended
    in_window = rows["end_time"].between(T0 + hold[0], T0 + hold[1], inclusive="left")
    assert rows.loc[in_window, "completion_tokens"].sum() / 30 == ended_tokens_per_s  # the old, end-based count
    assert level["output_tokens_per_s"] == pytest.approx(80.0)
    assert level["concurrency_mean"] == pytest.approx(8.0)


def test_long_queued_requests_give_users_times_tokens_over_e2e(tmp_path):
    # 10 users, 60 s requests (30 s waiting for the first token, 30 s streaming) against a 30 s window at an odd
    # offset: 5 users are streaming at every instant, at 600 / 30 tok/s each; one request ends every 6 s.
    rows = closed_loop_rows(10, T0, T0 + 300, 60.0, ttft_fraction=0.5, prompt_tokens=1000, completion_tokens=600)
    level = stats_of(write_run(tmp_path / "run", rows, [(10, T0, T0 + 97, T0 + 127)])).loc[10]
    assert level["output_tokens_per_s"] == pytest.approx(10 * 600 / 60)
    assert level["total_tokens_per_s"] == pytest.approx(10 * (600 + 1000) / 60)  # 5 first tokens x 1000 / 30 s
    assert level["requests"] == 5 and level["requests_per_s"] == pytest.approx(10 / 60)


def test_tokens_are_spread_from_first_token_to_end():
    nan = np.nan
    rows = pd.DataFrame(
        [  # start, ttft, end, ok, prompt, completion, chunks, target prompt
            (0.0, 5.0, 25.0, True, 1000, 200, 200, 1000),  # streams [5, 25): half in [10, 20), a quarter in [20, 30)
            (12.0, 2.0, 18.0, False, nan, nan, 40, 300),  # aborted at 18 s without usage: 40 chunks, its prompt
            (11.0, nan, 19.0, False, nan, nan, 0, 77),  # failed before any output: no prefill to count
            (15.0, nan, 19.0, True, 100, 50, 1, 100),  # non-streaming: spread over the whole request
            (16.0, 2.0, 18.0, True, 10, 1, 1, 10),  # one chunk at the end: all at that instant
        ],
        columns=[
            "start_time",
            "ttft_s",
            "end_time",
            "ok",
            "prompt_tokens",
            "completion_tokens",
            "chunks",
            "target_prompt_tokens",
        ],
    )
    windows = pd.DataFrame({"users": [1, 2], "start": [10.0, 20.0], "end": [20.0, 30.0]})
    output, prompt = tokens_in_windows(rows, windows)
    assert output.tolist() == pytest.approx([100 + 40 + 0 + 50 + 1, 50])
    assert prompt.tolist() == [300 + 100 + 10, 0]  # at the first token (the start without one); 1000 came at 5 s


def test_windows_derived_from_rows_without_levels_csv(tmp_path):
    # 100 requests start at T0 .. T0+99, each 10 s: window = [T0 + median e2e, last start) = [T0+10, T0+99).
    rows = request_rows(10, T0 + 10 + np.arange(100), 10.0, completion_tokens=100)
    stats = stats_of(write_run(tmp_path / "plain", rows))
    assert stats.loc[10, "window_s"] == pytest.approx(89.0)
    assert stats.loc[10, "requests"] == 89  # ends T0+10 .. T0+98
    assert stats.loc[10, "output_tokens_per_s"] == pytest.approx(100.0)


def test_interrupted_run_is_cut_at_its_last_row(tmp_path):
    levels = [*LEVELS, (40, T0 + 1220, T0 + 1240, T0 + 1340)]
    level_20 = level_20_rows()
    rows = pd.concat([level_10_rows(), level_20[level_20["end_time"] < T0 + 1170]])  # the run died at T0+1170
    run = load_run(write_run(tmp_path / "cut", rows, levels, meta={"complete": True}))
    windows, partial = level_windows(run)
    assert partial  # rows end long before level 40's hold_end even though run.json says complete
    assert windows["users"].tolist() == [10, 20]  # level 40 was never reached
    assert windows["partial"].tolist() == [False, True]
    assert windows["end"].iloc[-1] == pytest.approx(T0 + 1169.8 + 0.2 / 3)  # the last end: one every 0.2 s
    stats = level_stats(run, windows).set_index("users")
    assert stats.loc[20, "partial"] and not stats.loc[10, "partial"]


def test_level_killed_before_its_levels_row_gets_a_derived_window(tmp_path):
    rows = pd.concat([level_10_rows(), level_20_rows()], ignore_index=True)
    run = load_run(write_run(tmp_path / "killed", rows, LEVELS[:1]))  # level 20 never got its levels.csv row
    windows, partial = level_windows(run)
    assert partial and windows["partial"].tolist() == [False, True]
    # level 20 requests start every 0.2 s from T0+1100 + 0.2/3 to T0+1219.8 + 0.2/3 (e2e 4 s): window
    # [first start + 4 s, last start), 115.8 s long. Its edges fall on request ends: the first one counts, the last not.
    first_start = T0 + 1100 + 0.2 / 3
    assert windows[["start", "end"]].iloc[1].tolist() == pytest.approx([first_start + 4, first_start + 119.8])
    assert level_stats(run, windows).set_index("users").loc[20, "requests"] == 579  # 115.8 s / 0.2 s


def test_header_only_levels_csv_means_a_plain_locust_run(tmp_path):
    rows = request_rows(10, T0 + 10 + np.arange(100), 10.0, completion_tokens=100)
    folder = write_run(tmp_path / "plain", rows, levels=[])
    assert stats_of(folder).loc[10, "window_s"] == pytest.approx(89.0)


def test_run_json_complete_false_marks_partial(run_dir):
    (run_dir / "run.json").write_text('{"complete": false}')
    assert level_windows(load_run(run_dir))[1]


def test_timeline_counts_per_second():
    # Seconds after T0+1, streaming from the start (no TTFT): [0, 2) 10 tokens; [0.5, 1.5) failed after 4 chunks;
    # [2.5, 3.5) 10 tokens; one chunk of 3 tokens at 3.2 (its TTFT is its e2e).
    rows = request_rows(1, T0 + np.array([3.0, 2.5, 4.5, 4.2]), [2.0, 1.0, 1.0, 0.5], completion_tokens=[10, 10, 10, 3])
    rows["ttft_s"] = [0.0, 0.0, 0.0, 0.5]
    rows.loc[1, ["ok", "completion_tokens", "chunks"]] = [0, np.nan, 4]
    rows["ok"] = rows["ok"].astype(bool)
    seconds = timeline(rows)
    assert seconds["in_flight"].tolist() == [2, 1, 2, 0]
    assert seconds["failed"].tolist() == [0, 1, 0, 0]
    assert seconds["output_tokens"].tolist() == pytest.approx([5 + 2, 5 + 2, 5, 5 + 3])


def test_server_held_and_waiting_by_littles_law_and_client_cpu(tmp_path):
    """Level 20's requests take 4 s at the client; the server's histograms say it held each for 1 s, half of it
    queued: by Little's law it held 20 x 1/4 = 5 requests, 2.5 of them waiting (a gateway held the rest)."""
    folder = write_run(tmp_path / "run", level_20_rows(), LEVELS[1:])
    scrapes = np.arange(T0 + 1110, T0 + 1231, 10.0)  # 50 requests finish every 10 s
    server = pd.DataFrame({column: 0.0 for column in SERVER_METRICS_COLUMNS}, index=range(len(scrapes)))
    server = server.assign(
        time=scrapes,
        users=20,
        e2e_count=50,
        e2e_sum_s=50 * 1.0,
        queue_sum_s=50 * 0.5,
        frontend_cpu_s=0.5 * np.arange(len(scrapes)),
    )  # vLLM's API server: 0.5 s of CPU per 10 s
    server.to_csv(folder / SERVER_METRICS_FILE, index=False)
    health = [
        (T0 + t, 20, worker, cpu, 1.0, 5.0, 300.0)
        for t in (1100, 1115, 1130, 1230)
        for worker, cpu in (("w1", 40), ("w2", 60))
    ]
    health[5] = (T0 + 1130, 20, "w2", 93.0, 35.0, 250.0, 300.0)  # covers (1115, 1130]: inside the hold
    health[7] = (T0 + 1230, 20, "w2", 99.0, 2.0, math.nan, 300.0)  # covers (1130, 1230]: overlaps the hold's end
    pd.DataFrame(health, columns=CLIENT_HEALTH_COLUMNS).to_csv(folder / CLIENT_HEALTH_FILE, index=False)
    level = stats_of(folder).loc[20]
    assert level["server_e2e_mean_s"] == pytest.approx(1.0)
    assert level["server_in_system_mean"] == pytest.approx(5.0)
    assert level["server_waiting_mean"] == pytest.approx(2.5)
    assert level["server_frontend_cpu_percent"] == pytest.approx(5.0)
    assert level["client_loop_lag_max_ms"] == 35.0
    assert level["client_cpu_max_percent"] == 99.0
    assert level["client_read_behind_p99_ms"] == 250.0


def test_replicas_sum_into_the_fleet_and_their_imbalance(tmp_path):
    """Level 20 through a router to three replicas, each scraped on its own: the fleet holds what the three hold
    together (5 requests by Little's law, as one server would), and the busiest replica's 6 running requests over
    the replicas' mean of 4 make the imbalance 1.5."""
    folder = write_run(tmp_path / "run", level_20_rows(), LEVELS[1:])
    scrapes = np.arange(T0 + 1110, T0 + 1231, 10.0)
    replicas = []
    for replica, running, share in (("10.0.0.1:8000", 6, 0.5), ("10.0.0.2:8000", 3, 0.25), ("10.0.0.3:8000", 3, 0.25)):
        server = pd.DataFrame({column: 0.0 for column in SERVER_METRICS_COLUMNS}, index=range(len(scrapes)))
        replicas.append(
            server.assign(time=scrapes, users=20, replica=replica, running=running, e2e_count=50 * share).assign(
                e2e_sum_s=lambda s: s["e2e_count"] * 1.0
            )
        )
    pd.concat(replicas).sort_values("time").to_csv(folder / SERVER_METRICS_FILE, index=False)
    level = stats_of(folder).loc[20]
    assert level["server_e2e_mean_s"] == pytest.approx(1.0)
    assert level["server_in_system_mean"] == pytest.approx(5.0)
    assert level["replica_imbalance"] == pytest.approx(1.5)


def test_one_server_has_no_imbalance(tmp_path):
    folder = write_run(tmp_path / "run", level_20_rows(), LEVELS[1:])
    server = pd.DataFrame({column: 0.0 for column in SERVER_METRICS_COLUMNS}, index=range(3))
    server.assign(time=T0 + np.array([1110.0, 1120.0, 1130.0]), replica=np.nan).to_csv(
        folder / SERVER_METRICS_FILE, index=False
    )
    assert np.isnan(stats_of(folder).loc[20, "replica_imbalance"])


def test_each_replicas_running_and_share_of_the_requests(tmp_path):
    folder = write_run(tmp_path / "run", level_20_rows(), LEVELS[1:])
    scrapes = np.arange(T0 + 1100, T0 + 1241, 10.0)
    rows = []
    for replica, running, per_scrape, hits in (("a:1", 6, 30, 90), ("b:1", 2, 10, 10), ("c:1", 2, 10, 0)):
        server = pd.DataFrame({column: 0.0 for column in SERVER_METRICS_COLUMNS}, index=range(len(scrapes)))
        finished = per_scrape * np.arange(len(scrapes))
        queried = 100 * np.arange(len(scrapes))  # prompt tokens looked up, of which ``hits`` found, each scrape
        rows.append(
            server.assign(
                time=scrapes,
                users=20,
                replica=replica,
                running=running,
                request_success=finished,
                prefix_cache_queries=queried,
                prefix_cache_hits=queried * hits / 100,
            )
        )
    pd.concat(rows).to_csv(folder / SERVER_METRICS_FILE, index=False)
    run = load_run(folder)
    windows, _ = level_windows(run)
    replicas = replica_levels(run.tables["server_replicas"], windows).set_index("replica")
    assert replicas["running_mean"].tolist() == [6, 2, 2]
    assert replicas["request_share"].tolist() == pytest.approx([0.6, 0.2, 0.2])
    assert replicas["prefix_cache_hit_rate"].tolist() == pytest.approx([0.9, 0.1, 0.0])


def test_rows_naming_their_replica_give_each_ones_share(tmp_path):
    """Client-side spreading (-H naming two replicas): without their /metrics, the rows that ended in the level's
    window tell each replica's share (here 3 of every 4 went to a:1)."""
    rows = level_20_rows()
    rows["replica"] = np.where(np.arange(len(rows)) % 4 == 3, "b:1", "a:1")
    run = load_run(write_run(tmp_path / "run", rows, LEVELS[1:]))
    windows, _ = level_windows(run)
    replicas = replica_levels(run.tables.get("server_replicas"), windows, run.requests).set_index("replica")
    assert replicas["request_share"].tolist() == pytest.approx([0.75, 0.25], abs=0.02)
    assert replicas["running_mean"].isna().all()  # no replica's /metrics was scraped
