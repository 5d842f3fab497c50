"""An elastic fleet, whole: a spike of users against simulator replicas behind nginx that the test scaler
(tests/scaler.py) grows by their queue depth. The run's replicas.csv sees the replicas join, and the report's scaling
table and plot give each scale-up's lag, checked against what the scaler itself did."""

from __future__ import annotations

import json

import pandas as pd

from tests.helpers import SHORT, SLOW_SIM
from vllm_stress.analysis.cli import main as analysis_main
from vllm_stress.core import schema

SPIKE = "spike:3,12,6,14,24"  # 3 users, 12 from 6 s to 20 s, 3 again until 24 s
LOOK_SLACK_S = 2.5
READY_SLACK_S = 0.5  # the scaler stamps "serving" once its thread reads the replica's ready line: a look may be first
RELOAD_SLACK_S = 2.0  # a kept-alive connection nginx's old worker closes at a reload: cut within this of the reload
RULE = {"target_waiting": 2.0, "startup_delay_s": 2.0, "poll_s": 0.5, "scale_down_after_s": 60.0}


def test_a_spike_grows_the_fleet_and_the_report_times_the_scale_up(scaler, run_locust, tmp_path, figures):
    fleet = scaler(3, [*SLOW_SIM, "--max-num-seqs", "3"], **RULE)  # one replica holds the base, not the spike
    out = tmp_path / "run"
    args = ["-f", "locustfiles/chat.py,scenarios/shape.py", "-H", fleet.router, *SHORT, "--shape", SPIKE]
    args += ["--warmup", "2", "--ramp-time", "0.5", "--server-metrics-interval", "0.5", "--results-dir", out]
    args += [f"--server-metrics-url={url}" for url in fleet.metrics_urls]
    proc = run_locust(*map(str, args), timeout=120)
    assert proc.returncode == 0 or cut_by_reloads(out, fleet.events), proc.stderr[-3000:]
    looks = pd.read_csv(out / schema.REPLICAS_FILE)
    per_look = looks.groupby("time")["up"].sum()
    assert per_look.iloc[0] == 1 and per_look.max() >= 2, (fleet.events, per_look.tolist())
    assert analysis_main([str(out), "--out", str(tmp_path / "report"), "--gpus", "1", "--gpu-hour-price", "2"]) == 0
    summary = json.loads((tmp_path / "report" / schema.SUMMARY_JSON).read_text())
    [run] = summary["replica_set"]
    asked, serving = (
        {f"127.0.0.1:{fleet.ports[slot]}": at for at, what, slot in fleet.events if what == event and slot}
        for event in ("asked", "serving")
    )  # no replica leaves in this run: one of each per slot
    origin = looks["time"].min()
    print("scaler events", fleet.events, "scale-ups", json.dumps(run["scale_ups"], indent=1))
    assert run["scale_ups"] and {up["replica"] for up in run["scale_ups"]} <= set(serving)
    for up in run["scale_ups"]:
        # the looks (every 0.5 s, a slow one 2 s at most) see what the scaler saw on its own clock a look later
        assert (
            -READY_SLACK_S <= origin + up["up_s"] - serving[up["replica"]] <= LOOK_SLACK_S
        )  # up once the scaler had it serving
    timed = [up for up in run["scale_ups"] if up["lag_s"] is not None]  # a queue the looks saw (not a blip between)
    assert timed, run["scale_ups"]
    for up in timed:
        assert up["queue_grew_s"] <= asked[up["replica"]] - origin + LOOK_SLACK_S  # asked once it saw the queue
        assert up["lag_s"] >= RULE["startup_delay_s"]  # the start-up delay at least
        # which requests a lag counts (those sent in it): test_scaling.py's test_a_scale_up_lag_runs_from_the_queues_
        # growth_to_the_new_replica_serving; an nginx reload may drop a kept-alive request: failures not asserted
        assert up["requests"] > 0
    assert run["replica_hours"] > 0 and run["cost_usd"] == run["replica_hours"] * 2
    report = (tmp_path / "report" / schema.REPORT_MD).read_text()
    assert "## Scaling: " in report and (tmp_path / "report" / "scaling_1.png").is_file()
    assert [level["users"] for level in summary["levels"]] == [3, 12]  # the base after the spike: not again


def cut_by_reloads(out, events: list[tuple[float, str, int]]) -> bool:
    """Whether every failed request of the run was cut (no status) near one of nginx's reloads: a request sent on a
    kept-alive connection as the old worker closes it fails, which is the fixture's doing, not the suite's."""
    rows = pd.read_csv(out / schema.REQUESTS_FILE)
    failed = rows[(rows["ok"] == 0) & ~rows["error"].isin(["Aborted", "Cancelled"])]
    reloads = [at for at, what, _slot in events if what in ("serving", "left")]
    near_reload = failed["start_time"].map(lambda at: any(abs(at - reload) <= RELOAD_SLACK_S for reload in reloads))
    return bool(len(failed)) and (failed["error"] == "StreamTruncated").all() and near_reload.all()
