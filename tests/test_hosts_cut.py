"""A worker host cut off from the master mid-level, with the commands of docs/guides/distributed.md (a file of its
own: the suite's test processes take a file at a time, and these two runs are the longest of the host tests)."""

import json
import time
from collections import Counter

import pytest

from benchmarks.harness import read_rows
from tests.cluster import PROCESSES_PER_HOST, Cluster
from tests.helpers import analyse, served_as_rows


@pytest.mark.parametrize("comes_back", [False, True], ids=["stays-cut", "comes-back"])
def test_a_worker_host_cut_off_mid_level_is_accounted_and_the_run_completes(network, tmp_path, comes_back):
    """worker2's link goes down in level 1: the master marks its processes lost, worker1 carries on, worker2 quits
    after 15 s without its master; the server's count minus the rows is the run's unaccounted figure. Either its
    link stays down to the end (its requests in flight and unreported rows are unaccounted), or it comes back and
    the host joins again as new worker processes (its last rows may then still arrive: TCP retransmits them)."""
    cluster = Cluster(network, tmp_path / "run")
    # each level's users in one dispatch (--ramp-time 0): Locust's master removes a worker missing for a minute from
    # its heartbeat greenlet and starts a new dispatch there; one that comes while the shape's dispatch sleeps
    # between two steps of a ramp fails the run ("generator already executing", a Locust 2.47 race)
    # staying cut, the survivor's users end their requests at the stop (--stop-timeout) rather than cut them, so that
    # the server's count less the rows (a floor: a cut stream the server finished first is a row) is what the lost
    # worker took
    graceful = () if comes_back else ("--stop-timeout", "5")  # its requests take 0.1 s; the cut one's quit waits 5 s
    master = cluster.start("--step-time", "14", "--ramp-time", "0", *graceful, levels="4,8,12")
    master.wait_for(r"Level 1/3", 60)
    master.wait_for(r"Level 1/3 \(4 users\): holding", 90)  # every user runs and the first requests completed
    cut_host = cluster.worker_hosts[1]
    cut_host.cut()
    cut = time.monotonic()
    lost_line = master.wait_for(r"Worker (worker2_\w+) lost", 40)
    marked_lost_s = time.monotonic() - cut
    assert cluster.workers[1].wait(40) == 0, cluster.workers[1].output  # quits when the master is silent 15 s
    quit_s = time.monotonic() - cut
    if comes_back:
        cut_host.mend()
        cluster.start_worker(cut_host)
    assert master.wait(240) == 0, master.output

    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    rows = read_rows(tmp_path / "run" / "requests.csv")
    served = cluster.server_completed()
    print(
        f"marked lost {marked_lost_s:.1f} s and quit {quit_s:.1f} s after the cut; rows {len(rows)}, server "
        f"{served}, unaccounted {meta['unaccounted_requests']}"
    )
    lost_ids = {lost["worker"] for lost in meta["lost_workers"]}
    assert lost_line[1] in lost_ids and {w.split("_")[0] for w in lost_ids} == {"worker2"}
    # each lost process is named with the rows it sent, as requests.csv holds them (none when the cut came before its
    # first report: rows travel with the reports every 3 s; more than at the loss when the link comes back and a
    # report sent before the cut still arrives); what the server served beyond the rows is counted below
    rows_by_worker = Counter(row["worker"] for row in rows)
    assert len(lost_ids) == PROCESSES_PER_HOST
    assert all(lost["rows"] == rows_by_worker[lost["worker"]] for lost in meta["lost_workers"]), meta["lost_workers"]
    assert meta["complete"] is True and meta["server_requests"] == served  # the master's count is the server's
    assert served_as_rows(served - meta["unaccounted_requests"], rows)  # the unaccounted are what the rows lack
    by_level = Counter((row["users"], row["worker"].split("_")[0]) for row in rows if row["worker"] not in lost_ids)
    assert by_level["8", "worker1"] and by_level["12", "worker1"]  # the survivor carried on
    if comes_back:
        assert by_level["12", "worker2"] > 0  # the host that came back got users again
        return
    assert meta["unaccounted_requests"] > 0 and by_level["12", "worker2"] == 0
    assert f"{meta['unaccounted_requests']} more served by the server and lost with worker(s)" in master.lines[-1]
    summary = analyse(tmp_path / "run", tmp_path / "report")
    assert summary["unaccounted"][0]["unaccounted_requests"] == meta["unaccounted_requests"]
    report = (tmp_path / "report" / "report.md").read_text()
    assert f"{meta['unaccounted_requests']} requests unaccounted: the server finished {served}" in report
