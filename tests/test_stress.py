"""Stress (docs/guides/stress.md): client cancellations and bursty open-loop arrivals, checked on what the simulator
recorded (its --request-log and /metrics)."""

from __future__ import annotations

import json
import math
import time
from types import SimpleNamespace

import gevent
import numpy as np
import pandas as pd
import pytest
import requests
from locust.event import Events

from benchmarks.harness import read_rows
from tests.helpers import NO_CANARIES, analyse, run_json
from vllm_stress.analysis.features.stress import arrival_cvs
from vllm_stress.client.cancel import CancelAfter, Cancellations, cancellations_for, parse_after
from vllm_stress.client.pacing import BurstClock, Microburst, OpenLoopArrivals, parse_microburst
from vllm_stress.core.numbers import percent
from vllm_stress.core.schema import ABORTED, CANCELLED
from vllm_stress.master import hooks, kneeprofile
from vllm_stress.master.serverpost import Posted
from vllm_stress.simulator.api.requestlog import read_request_log

QUIET = ["--headless", "--only-summary", *NO_CANARIES]
RATE = 20  # req/s: gaps of 50 ms on average, so that a loaded machine's late sends (a few ms) count little
DURATION_S = 21  # about 400 arrivals per burstiness
EDGE_S = 1.0  # the arrivals of the first and last second are left out: the users start, and the stop cuts
# The random state of the draw (--arrival-seed): 400 gamma gaps have a sampling error of a few % in their CV; this
# state's gaps are within DRAW_REL of 1/sqrt(B) for each B tested (the first value whose are;
# test_the_seeded_draw_is_representative checks it), so that the 5 % is left to what the sends and the network add.
SEED = 17
DRAW_REL = 0.015


def test_cancellations_are_the_servers_aborts_and_free_their_slots(run_locust, simulator, tmp_path):
    """Half the requests are cut at their 20th token. Steps of 50 ms: the driver hands each step's tokens over on its
    own and waits out the step's time, in which the client's cut reaches the server."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.05", "--request-log", str(log))
    args = ["-u", "4", "-t", "6s", "--input-tokens", "16", "--output-tokens", "60", "--arrival-seed", "3"]
    proc = run_chat(run_locust, sim.url, tmp_path, *args, "--cancel-share", "0.5", "--cancel-after", "20tokens")
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = requests.get(f"{sim.url}/metrics", timeout=10).text
    sim.stop()  # flushes the log
    records = read_request_log(str(log))
    rows = read_rows(tmp_path / "run" / "requests.csv")
    cancelled = [row for row in rows if row["error"] == CANCELLED]
    cut_at_stop = {row["request_id"] for row in rows if row["error"] == ABORTED}
    aborts = {rid for rid, record in records.items() if record["finish_reason"] == "abort"}
    assert len(cancelled) >= 8, proc.stderr[-2000:]
    # the client's cancellations are the server's aborts, one for one (the stop's cuts are aborts too)
    assert {row["request_id"] for row in cancelled} == aborts - cut_at_stop
    assert all(row["cancel_after"] == "20tokens" and row["chunks"] == "20" for row in cancelled)
    drawn = [row for row in rows if row["cancel_after"] and row["error"] != ABORTED]
    assert all(row["error"] == CANCELLED for row in drawn) and len(drawn) < len(rows)  # only the drawn share
    for row in cancelled:
        record = records[row["request_id"]]
        # the engine generated at most one token it never wrote (the step it had computed when the client left):
        # the request left the running batch, and the gauge counting it, within one step of the cut
        assert 20 <= record["chunks"] <= record["completion_tokens"] <= record["chunks"] + 1, record
    # the generation counter stopped for each aborted request at what it had generated; nothing is left running
    assert sample(metrics, "vllm:generation_tokens_total") == sum(r["completion_tokens"] for r in records.values())
    assert sample(metrics, "vllm:num_requests_running") == 0
    assert run_json(tmp_path / "run")["stress"] == {
        "arrival_rate": None,
        "burstiness": 1.0,
        "microburst": None,
        "cancel_share": 0.5,
        "cancel_after": "20tokens",
    }
    summary = analyse(tmp_path / "run", tmp_path / "report")  # cancelled rows: their own population, in no latency
    assert summary["stress"]["cancel_share"] == 0.5
    assert 0 < sum(level["cancelled"] for level in summary["levels"]) <= len(cancelled)
    assert "## Stress: cancellations and bursts" in (tmp_path / "report" / "report.md").read_text()


def test_a_delay_cuts_every_drawn_request(run_locust, simulator, tmp_path):
    """--cancel-share 1 --cancel-after 300ms: every request is cut 300 ms after its send, long before its 2 s answer
    ends; the server logged each as aborted."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.01", "--request-log", str(log))
    args = ["-u", "2", "-t", "3s", "--input-tokens", "16", "--output-tokens", "200"]
    proc = run_chat(run_locust, sim.url, tmp_path, *args, "--cancel-share", "1", "--cancel-after", "300ms")
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()
    records = read_request_log(str(log))
    rows = [row for row in read_rows(tmp_path / "run" / "requests.csv") if row["error"] != ABORTED]
    assert len(rows) >= 4 and all(row["error"] == CANCELLED and row["cancel_after"] == "300ms" for row in rows)
    assert all(float(row["e2e_s"]) >= 0.3 and int(row["chunks"]) < 200 for row in rows)
    assert all(records[row["request_id"]]["finish_reason"] == "abort" for row in rows)


def test_the_sdk_user_cuts_its_stream_too(run_locust, simulator, tmp_path):
    """The OpenAI SDK's user cut at its 5th token closes its stream: the server aborts each one."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.01", "--request-log", str(log))
    # 10 s of output: the server is still writing when the cut reaches it, even from a client lagging on a loaded host
    args = ["-u", "2", "-t", "3s", "--input-tokens", "16", "--output-tokens", "1000"]
    proc = run_chat(
        run_locust, sim.url, tmp_path, *args, "--cancel-share", "1", "--cancel-after", "5tokens", user="sdk"
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()
    records = read_request_log(str(log))
    rows = [row for row in read_rows(tmp_path / "run" / "requests.csv") if row["error"] != ABORTED]
    assert len(rows) >= 4 and all(row["error"] == CANCELLED and row["chunks"] == "5" for row in rows)
    assert all(records[row["request_id"]]["finish_reason"] == "abort" for row in rows)


def test_saturated_stops_the_ramp_where_the_servers_queue_grows_through_the_hold(run_locust, simulator, tmp_path):
    """An open loop of 16 requests/s against two sequences at a time of about 0.55 s each (3.6 requests/s): a pool
    of 2 users keeps the server's queue empty; a pool of 300 sends at the full rate (the arrivals the first level
    could not send at once, then 16 a second), and the queue the server reports grows through the whole hold (its
    warm-up cut at --max-step-time, long before the pool runs dry: 130-190 waiting at its end), so --stop-on
    saturated ends the ramp there: 600 users never run. The queue grows by about 12 a second: at 10 requests/s (6 a
    second) a load generator stalled for a second on a loaded machine once left the hold's last two thirds level (71
    and 70 waiting)."""
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.05", "--max-num-seqs", "2")
    ramp = ["--levels", "2,300,600", "--step-time", "3", "--warmup", "1", "--max-step-time", "4", "--ramp-time", "0.5"]
    proc = run_locust(
        *("-f", "locustfiles/chat.py,scenarios/shape.py", "-H", sim.url, *QUIET, *ramp, "--arrival-rate", "16"),
        *("--input-tokens", "16", "--output-tokens", "10", "--stop-on", "saturated"),
        *("--server-metrics-interval", "0.5", "--results-dir", str(tmp_path / "run")),
        timeout=180,
    )
    folder = tmp_path / "run"
    stopped = run_json(folder)["stopped"]
    assert stopped is not None and stopped["after_users"] == 300, proc.stderr[-3000:]
    assert stopped["reason"].startswith("saturated: the server's queue grew through the hold (")
    assert [int(level["users"]) for level in read_rows(folder / "levels.csv")] == [2, 300]  # 600 never ran
    (first, held) = read_rows(folder / "levels.csv")
    scrapes = read_rows(folder / "server_metrics.csv")
    queue = [
        float(s["waiting"]) for s in scrapes if float(held["hold_start"]) <= float(s["time"]) < float(held["hold_end"])
    ]
    quiet = [
        float(s["waiting"])
        for s in scrapes
        if float(first["hold_start"]) <= float(s["time"]) < float(first["hold_end"])
    ]
    # the server's own gauge: at most one request between two steps, then a queue that grows
    assert max(quiet) <= 1 and queue[-1] > queue[0] + 5, (quiet, queue)


def test_a_stop_on_rule_ends_the_ramp_after_the_level_that_broke(run_locust, simulator, tmp_path):
    """Two sequences at a time, each about 0.55 s (prefill and 10 steps of 50 ms): at 1 and 2 users nothing waits and
    every request ends well within --request-timeout 1.5 s; at 8 users six wait in the server's queue, each about a
    second, so that most time out, and errors>20% ends the ramp before 16 users."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.05", "--max-num-seqs", "2", "--request-log", str(log))
    ramp = ["--levels", "1,2,8,16", "--step-time", "3", "--warmup", "1", "--ramp-time", "0.5"]
    proc = run_locust(
        *("-f", "locustfiles/chat.py,scenarios/shape.py", "-H", sim.url, *QUIET, *ramp),
        *("--input-tokens", "16", "--output-tokens", "10", "--request-timeout", "1.5", "--stop-on", "errors>20%"),
        *("--results-dir", str(tmp_path / "run")),
        timeout=180,
    )
    sim.stop()  # flushes the log
    folder = tmp_path / "run"
    stopped = run_json(folder)["stopped"]
    assert stopped["after_users"] == 8, proc.stderr[-3000:]
    assert [int(level["users"]) for level in read_rows(folder / "levels.csv")] == [1, 2, 8]  # 16 never ran
    rows = read_rows(folder / "requests.csv")
    assert {row["users"] for row in rows} == {"1", "2", "8"}
    # the reason's share is the level's failed share over its hold, as levels.csv and requests.csv have them
    (hold,) = [level for level in read_rows(folder / "levels.csv") if level["users"] == "8"]
    start, end = float(hold["hold_start"]), float(hold["hold_end"])
    held = [row for row in rows if row["users"] == "8" and start <= float(row["end_time"]) < end]
    counted = [row for row in held if row["error"] not in (ABORTED, CANCELLED)]
    failed = [row for row in counted if row["ok"] != "1"]
    assert stopped["reason"] == f"errors {percent(len(failed) / len(counted))} > 20.0 %"
    assert len(failed) / len(counted) > 0.2 and {row["error"] for row in failed} == {"Timeout"}
    assert f"Stopped early after 8 users: {stopped['reason']}" in proc.stderr
    # below 8 users none failed; the server kept each request that timed out in its queue longer than any of theirs
    # (a step at most), or never ran it (no queue time: the client left while it waited)
    assert all(row["ok"] == "1" or row["error"] == ABORTED for row in rows if row["users"] in ("1", "2"))
    records = read_request_log(str(log))
    waits = {row["request_id"]: records[row["request_id"]]["queue"] for row in rows if row["error"] != ABORTED}
    unloaded = max(waits[row["request_id"]] for row in rows if row["users"] in ("1", "2") and row["ok"] == "1")
    assert all(waits[row["request_id"]] is None or waits[row["request_id"]] > unloaded for row in failed), unloaded
    summary = analyse(folder, tmp_path / "report")
    assert summary["stopped"] == stopped
    levels = {level["users"]: level for level in summary["levels"]}
    assert sorted(levels) == [1, 2, 8]  # the levels that ran, all reported; the one judged over the report's window
    assert (levels[8]["requests"], levels[8]["failures"]) == (len(counted), len(failed))
    assert f"Stopped early after 8 users: {stopped['reason']}." in (tmp_path / "report" / "report.md").read_text()


def run_chat(run_locust, url: str, tmp_path, *args: str, user: str = "chat"):
    """A headless run of ``user`` (a locustfile's name) against ``url``, its folder tmp_path/run."""
    return run_locust(
        "-f",
        f"locustfiles/{user}.py",
        "-H",
        url,
        *QUIET,
        "-r",
        "100",
        *args,
        "--results-dir",
        str(tmp_path / "run"),
        timeout=180,
    )


def sample(metrics: str, name: str) -> float:
    """The value of an unlabelled-but-for-the-model sample of a Prometheus text page."""
    return sum(float(line.rsplit(" ", 1)[1]) for line in metrics.splitlines() if line.startswith(name + "{"))


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 2.0])
def test_burstiness_sets_the_gaps_cv_the_server_sees(run_locust, simulator, tmp_path, burstiness):
    """Gamma arrivals of shape B at RATE: the coefficient of variation of the gaps between the server's arrival
    stamps, each less the lateness the client recorded for its send (schedule_lag_s), is 1/sqrt(B) within 5 %, over
    about 400 arrivals of one-token requests (the seeded draw SEED). A loaded machine wakes the client late (up to
    125 ms in a clean clone's run, with the raw gaps' CV 5.1 % above at B = 2): the row says by how much."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--request-log", str(log))
    args = [
        "-u",
        "10",
        "-t",
        f"{DURATION_S}s",
        "--input-tokens",
        "8",
        "--output-tokens",
        "1",
        "--arrival-seed",
        str(SEED),
    ]
    proc = run_chat(run_locust, sim.url, tmp_path, *args, "--arrival-rate", str(RATE), "--burstiness", str(burstiness))
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()
    lag = {row["request_id"]: float(row["schedule_lag_s"]) for row in read_rows(tmp_path / "run" / "requests.csv")}
    arrivals = np.sort(
        [record["arrival"] - lag[rid] for rid, record in read_request_log(str(log)).items() if rid in lag]
    )
    gaps = np.diff(trimmed(arrivals))
    assert len(gaps) > 0.9 * RATE * (DURATION_S - 2 * EDGE_S)
    cv = gaps.std() / gaps.mean()
    print(f"burstiness {burstiness}: {len(gaps)} gaps, CV {cv:.4f} (1/sqrt(B) = {1 / math.sqrt(burstiness):.4f})")
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.05), (len(gaps), cv)


def trimmed(arrivals: np.ndarray) -> np.ndarray:
    """The arrivals (sorted, seconds) without those of the first and last EDGE_S."""
    return arrivals[(arrivals > arrivals[0] + EDGE_S) & (arrivals < arrivals[-1] - EDGE_S)]


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 2.0])
def test_the_seeded_draw_is_representative(burstiness):
    """The schedule drawn with SEED over DURATION_S, trimmed as the server's arrivals are, has its law's CV within
    DRAW_REL."""
    arrivals = OpenLoopArrivals(RATE, seed=SEED, burstiness=burstiness)
    times = np.cumsum([arrivals.gap() for _ in range(RATE * DURATION_S * 2)])
    gaps = np.diff(trimmed(times[times < DURATION_S]))
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=DRAW_REL)


@pytest.mark.parametrize("burstiness", [0.5, 1.0, 2.0])
def test_the_gaps_are_vllms_gamma(burstiness):
    """Mean gap 1/rate, CV 1/sqrt(B), as vLLM's benchmark draws them; burstiness 1 is the Poisson clock of before."""
    arrivals = OpenLoopArrivals(50.0, seed=7, burstiness=burstiness)
    gaps = np.array([arrivals.gap() for _ in range(20000)])
    assert gaps.mean() == pytest.approx(1 / 50, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1 / math.sqrt(burstiness), rel=0.03)
    with pytest.raises(ValueError, match="--burstiness"):
        OpenLoopArrivals(50.0, burstiness=0)


def test_cancel_after_reads_a_delay_or_tokens():
    assert parse_after("2s") == CancelAfter("2s", seconds=2.0)
    assert parse_after("500ms") == CancelAfter("500ms", seconds=0.5)
    assert parse_after("20tokens") == CancelAfter("20tokens", tokens=20)
    for bad in ("2", "0s", "1.5tokens", "soon"):
        with pytest.raises(ValueError, match="--cancel-after"):
            parse_after(bad)
    options = SimpleNamespace(cancel_share=0.25, cancel_after="1s")
    draws = cancellations_for(options, "x")
    assert isinstance(draws, Cancellations)
    share = sum(draws.draw() is not None for _ in range(4000)) / 4000
    assert share == pytest.approx(0.25, abs=0.03)
    assert cancellations_for(SimpleNamespace(cancel_share=0.0, cancel_after="1s")) is None


def test_a_stopped_ramp_is_one_overview_line_and_no_stress_section():
    """run.json's stopped alone (no cancellations, no bursts): the report's overview says it, no table or column."""
    from vllm_stress.analysis.features import stress

    config = {"stopped": {"after_users": 8, "reason": "errors 30.0 % > 20.0 %"}, "levels": []}
    assert stress.used(config) and stress.columns(config) == [] and stress.blocks("A", config, {}) == []
    assert stress.overview("A", config) == ["A: Stopped early after 8 users: errors 30.0 % > 20.0 %."]
    both = config | {"stress": {"cancel_share": 0.1, "cancel_after": "2s", "arrival_rate": None, "burstiness": 1.0}}
    assert stress.overview("A", both) == [
        "In A, the client cancelled 10.0 % of its requests at 2s.",
        "A: Stopped early after 8 users: errors 30.0 % > 20.0 %.",
    ]
    assert [column.header for column in stress.columns(both)] == ["cancelled"]


def test_microbursts_reach_the_server_and_queue_it(run_locust, simulator, tmp_path):
    """--microburst 12,100,4 on top of 2 req/s against two sequences at a time: the server's request log has each
    burst's 12 arrivals within the 100 ms (plus a loaded machine's margin), 4 s apart; the report's burst table says
    the server queued them, and their TTFT is at least that of the requests sent after each burst."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.02", "--max-num-seqs", "2", "--request-log", str(log))
    args = ["-u", "24", "-t", "11s", "--input-tokens", "16", "--output-tokens", "8", "--arrival-seed", str(SEED)]
    burst = ["--arrival-rate", "2", "--microburst", "12,100,4", "--server-metrics-interval", "0.25"]
    proc = run_chat(run_locust, sim.url, tmp_path, *args, *burst)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sim.stop()
    folder = tmp_path / "run"
    records = read_request_log(str(log))
    bursts: dict[str, list[float]] = {}
    for row in read_rows(folder / "requests.csv"):
        if row["burst"]:
            bursts.setdefault(row["burst"], []).append(records[row["request_id"]]["arrival"])
    assert sorted(bursts) == ["1", "2"], proc.stderr[-3000:]  # at 4 s and 8 s
    assert all(len(arrivals) == 12 and max(arrivals) - min(arrivals) < 0.1 + 0.4 for arrivals in bursts.values())
    assert min(bursts["2"]) - min(bursts["1"]) == pytest.approx(4.0, abs=0.4)
    summary = analyse(folder, tmp_path / "report")
    assert summary["stress"]["microburst"] == {"requests": 12, "within_ms": 100.0, "every_s": 4.0}
    table = summary["microbursts"]
    assert [row["burst"] for row in table] == [1, 2] and all(row["requests"] == 12 for row in table)
    for row in table:  # two slots for twelve requests: most of them wait, more than the requests after them
        assert row["queue_peak"] >= 4 and row["after_requests"] > 0, row
        assert row["ttft_burst_p50_s"] >= row["ttft_after_p50_s"], row
    assert "Microbursts of 12 requests within 100 ms every 4 s" in (tmp_path / "report" / "report.md").read_text()


def test_each_worker_sends_its_share_of_each_burst():
    """Three workers share a burst of 8 within 100 ms every 2 s: together each index once per burst, at i x 12.5 ms;
    alone, a process sends them all; merged with a renewal process, the arrivals come in time order."""
    burst = parse_microburst("8,100,2")
    assert burst == Microburst(8, 0.1, 2.0) and parse_microburst("") is None
    shares = [BurstClock(burst, worker, 3) for worker in range(3)]
    taken = sorted(clock.take() for clock in shares for _ in range(len(clock.mine) * 2))
    expected = sorted((number * 2.0 + i * 0.0125, number) for number in (1, 2) for i in range(8))
    assert [number for _, number in taken] == [number for _, number in expected]
    assert [offset for offset, _ in taken] == pytest.approx([offset for offset, _ in expected])
    assert BurstClock(burst, 3, 9).mine == [3] and BurstClock(burst, 8, 9).mine == []
    arrivals = OpenLoopArrivals(5.0, seed=1, bursts=BurstClock(burst))
    offsets = [arrivals.take() for _ in range(40)]
    assert [offset for offset, _ in offsets] == sorted(offset for offset, _ in offsets)
    assert sum(number == 1 for _, number in offsets) == 8 and offsets[0] == (0.0, None)
    for bad in ("8,100", "0,100,2", "8,2000,2", "eight,1,2"):
        with pytest.raises(ValueError, match="--microburst"):
            parse_microburst(bad)


def test_a_profile_at_the_knee_lies_in_its_level(run_locust, simulator, tmp_path):
    """--profile-at 4 --profile-seconds 1.5 on a ramp of 1 then 4 users: the simulator (--profiler-dir) profiled once,
    from within the hold of 4 users' level to 1.5 s later, still inside it; run.json says when and what it answered."""
    traces = tmp_path / "traces"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.02", "--profiler-dir", str(traces))
    ramp = ["--levels", "1,4", "--step-time", "4", "--warmup", "0.5", "--ramp-time", "0.5"]
    proc = run_locust(
        *("-f", "locustfiles/chat.py,scenarios/shape.py", "-H", sim.url, *QUIET, *ramp),
        *("--input-tokens", "16", "--output-tokens", "8", "--profile-at", "4", "--profile-seconds", "1.5"),
        *("--results-dir", str(tmp_path / "run")),
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    (trace_file,) = traces.iterdir()
    trace = json.loads(trace_file.read_text())
    (level,) = [level for level in read_rows(tmp_path / "run" / "levels.csv") if level["users"] == "4"]
    assert float(level["hold_start"]) - 0.5 <= trace["started"] < trace["stopped"] <= float(level["hold_end"])
    assert trace["stopped"] - trace["started"] == pytest.approx(1.5, abs=0.5)
    profile = run_json(tmp_path / "run")["profile"]
    assert (profile["start_status"], profile["stop_status"]) == (200, 200)
    assert profile["asked"] == {"at_users": 4, "when_running": None, "seconds": 1.5}
    assert profile["started"] <= trace["started"] and profile["stopped"] <= trace["stopped"]


def test_a_server_that_does_not_profile_is_one_line(run_locust, simulator, tmp_path):
    """Without a profiler the server has no /start_profile (404): one line says so, the run goes on to its end."""
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.02")
    proc = run_chat(
        run_locust,
        sim.url,
        tmp_path,
        *("-u", "2", "-t", "4s", "--input-tokens", "16", "--output-tokens", "8"),
        *("--profile-when-running", "1", "--server-metrics-interval", "0.5"),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stderr.splitlines() if "does not profile" in line]
    assert len(lines) == 1 and "/start_profile: 404" in lines[0], proc.stderr[-3000:]
    profile = run_json(tmp_path / "run")["profile"]
    assert profile["start_status"] == 404 and "stopped" not in profile
    assert requests.post(f"{sim.url}/start_profile", timeout=5).status_code == 404
    rows = read_rows(tmp_path / "run" / "requests.csv")
    assert max(float(row["end_time"]) for row in rows) > profile["started"] + 1  # the run went on


def test_microbursts_alone_are_one_overview_line_and_a_table():
    """run.json's stress with microbursts and no --arrival-rate: the overview says the bursts, the section says the
    arrivals are the bursts' alone and has their table."""
    from vllm_stress.analysis.features import stress

    burst = {"requests": 8, "within_ms": 50.0, "every_s": 5.0}
    asked = {"arrival_rate": None, "burstiness": 1.0, "microburst": burst, "cancel_share": 0.0, "cancel_after": None}
    row = {"burst": 1, "requests": 8, "sent_within_ms": 44.0, "queue_before": 0.0, "queue_peak": 6.0}
    row |= {"ttft_burst_p50_s": 0.4, "ttft_burst_p99_s": 0.7, "after_requests": 0}
    row |= {"ttft_after_p50_s": math.nan, "ttft_after_p99_s": math.nan}
    config = {"stress": asked, "microbursts": [row], "levels": []}
    assert stress.overview("A", config) == ["In A, 8 requests came within 50 ms every 5 s."]
    text = "\n".join(str(block) for block in stress.blocks("A", config, {}))
    assert "Open loop of microbursts alone" in text and "Microbursts of 8 requests within 50 ms every 5 s" in text
    assert "0.400" in text and "6" in text


def test_a_worker_with_no_share_of_the_bursts_waits_until_stopped():
    """More workers than a burst's requests and no --arrival-rate: a worker with no share sends nothing, its user
    waiting until the run kills it."""
    import gevent

    arrivals = OpenLoopArrivals(0.0, bursts=BurstClock(parse_microburst("2,10,1"), worker_index=2, workers=3))
    arrivals.start_at(0.0)
    waiting = gevent.spawn(arrivals.wait)
    gevent.sleep(0.2)
    assert not waiting.dead
    waiting.kill()
    assert arrivals.burst is None


def test_the_arrival_cv_is_over_the_scheduled_sends_when_there_are_some():
    """An open loop of sessions: its first turns kept the schedule (a lag each), 1 s apart; their later turns, sent
    after answers, are no arrivals. A closed loop's sends are all its arrivals."""
    firsts = [0.0, 1.0, 2.0, 3.0, 4.0]
    later = [0.4, 0.5, 1.7, 3.2]
    rows = pd.DataFrame(
        {
            "users": 1,
            "start_time": firsts + later,
            "schedule_lag_s": [0.0] * len(firsts) + [np.nan] * len(later),
        }
    )
    windows = pd.DataFrame({"users": [1], "start": [-1.0], "end": [10.0]})
    assert arrival_cvs(rows, windows)[1] == 0.0  # evenly spaced arrivals
    closed = arrival_cvs(rows.assign(schedule_lag_s=np.nan), windows)[1]
    gaps = np.diff(np.sort(firsts + later))
    assert closed == pytest.approx(gaps.std() / gaps.mean())


def test_a_slow_stop_profile_is_awaited_at_the_stop_not_sent_again(monkeypatch):
    """vLLM writes its trace before /stop_profile answers (a minute on a big model): a test that stops meanwhile
    waits for that answer; it neither cuts the POST nor sends a second, and run.json's ``stopped`` is the first's."""
    posted: list[str] = []

    def slow_post(environment, url, headers, timeout_s):
        posted.append(url.rsplit("/", 1)[1])
        gevent.sleep(1.0 if url.endswith("/stop_profile") else 0)
        return Posted(200, "200 OK", None)

    monkeypatch.setattr(kneeprofile, "post_route", slow_post)
    environment = SimpleNamespace(
        events=Events(),
        parsed_options=SimpleNamespace(profile_at=None, profile_when_running=1, profile_seconds=0.1),
        host="http://127.0.0.1:1",
    )
    updates: list[dict] = []
    profile = kneeprofile.KneeProfile(environment, SimpleNamespace(update=updates.append), SimpleNamespace(headers={}))
    try:
        profile.start(profile.asked)
        gevent.sleep(0.5)  # the stop's POST (0.1 s after the start, a loaded machine's lateness aside) is under way
        stopping = time.time()
        environment.events.test_stop.fire()
    finally:
        for hook, listener in (
            (hooks.level_started, profile.on_level_started),
            (hooks.level_held, profile.on_level_held),
        ):
            hook.remove_listener(listener)
        hooks.server_scraped.remove_listener(profile.on_scraped)
    assert posted == ["start_profile", "stop_profile"]
    record = updates[-1]["profile"]
    assert record["stop_status"] == 200 and record["started"] + 0.1 <= record["stopped"] < stopping
