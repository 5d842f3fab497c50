"""Master, workers and server on separate hosts (network namespaces on a bridge), run with the commands of
docs/guides/distributed.md."""

import json
import os
import statistics
import sys
import time
from collections import Counter

from benchmarks.harness import read_rows
from tests.cluster import PROCESSES_PER_HOST, WORKER_HOSTS, Cluster, wait_or_dump
from tests.helpers import served_as_rows
from tests.netns import netns_unavailable
from vllm_stress.simulator.api.requestlog import read_request_log


def test_readme_ramp_across_four_hosts(network, tmp_path):
    cluster = Cluster(network, tmp_path / "run")
    # 3 s holds (cluster.RAMP's are 6 s): still dozens of ~0.1 s requests per level, spread over every worker
    # process, which is all the accounting checks below need
    master = cluster.start("--step-time", "3")
    assert master.wait(180) == 0, master.output
    for worker in cluster.workers:  # the master told them to quit
        assert worker.wait(30) == 0, worker.output
    rows = read_rows(tmp_path / "run" / "requests.csv")
    served = cluster.server_completed()
    assert served > 0 and served_as_rows(served, rows)  # every request the server served is a row on the master
    assert {row["users"] for row in rows} == {"2", "4", "6"}
    by_host = Counter(row["worker"].split("_")[0] for row in rows)
    assert set(by_host) == set(WORKER_HOSTS), by_host  # worker ids carry their host's name
    processes = {row["worker"] for row in rows}
    assert len(processes) == len(WORKER_HOSTS) * PROCESSES_PER_HOST
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["complete"] is True and meta["lost_workers"] == []
    assert meta["server_requests"] == served and meta["unaccounted_requests"] == 0


def test_master_cut_off_from_every_worker_nothing_hangs(network, tmp_path):
    cluster = Cluster(network, tmp_path / "run")
    master = cluster.start("--step-time", "30", levels="4,8")
    master.wait_for(r"Level 1/\d \(4 users\): holding", 90)
    cluster.master_host.cut()
    cut = time.monotonic()
    for worker in cluster.workers:  # every worker quits by itself once the master is silent for 15 s
        assert worker.wait(40) == 0, worker.output
    workers_quit_s = time.monotonic() - cut
    master.wait_for(r"The last worker went missing", 30)
    code = master.wait(60)
    print(f"workers quit {workers_quit_s:.1f} s, master exited ({code}) {time.monotonic() - cut:.1f} s after the cut")
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert len(meta["lost_workers"]) == len(WORKER_HOSTS) * PROCESSES_PER_HOST
    assert code == 0 and meta["ended"]  # the master stopped the test and closed the run folder


def test_server_cut_off_mid_level_fails_as_timeouts(network, tmp_path):
    cluster = Cluster(network, tmp_path / "run")
    master = cluster.start("--step-time", "12", "--request-timeout", "4", levels="4")
    master.wait_for(r"Level 1/\d \(4 users\): holding", 90)
    cluster.server.cut()
    cut = time.monotonic()
    # Locust's exit code for a run with failures, within the level and its request timeout: the stop does not wait
    # on a server that cannot answer its scrapes (a 60 s settle did)
    assert wait_or_dump(master, 50) == 1
    print(f"master exited {time.monotonic() - cut:.1f} s after the cut")
    rows = read_rows(tmp_path / "run" / "requests.csv")
    errors = Counter(row["error"] for row in rows)
    assert errors["Timeout"] >= 4 and set(errors) <= {"", "Timeout", "Aborted"}, errors
    failures = read_rows(tmp_path / "run" / "locust_failures.csv")
    assert any("Timeout" in row["Error"] for row in failures)  # the same class in Locust's failures table
    print(f"rows {len(rows)}: {dict(errors)}")


def test_added_latency_shifts_ttft_by_it_and_no_more(network, tmp_path):
    """The same level direct and through a proxy adding 100 ms each way, each request held against the simulator's
    own record of it (--request-log, same host clock): through the proxy, the request reached the server at least
    100 ms after the client sent it and its first token reached the client at least 100 ms after the server wrote
    it, so the client's TTFT and e2e hold the server's plus the round trip's 200 ms; and, direct or proxied, the
    client's time per output token is the server's (a delay per chunk that added up would show). A 4 s hold of 4
    users still gives each run dozens of requests for the medians."""
    log = tmp_path / "server-requests.jsonl"
    cluster = Cluster(network, tmp_path / "direct", "--request-log", str(log))
    proxy = cluster.server.start(
        [
            sys.executable,
            "-m",
            "tests.delayproxy",
            "--listen",
            cluster.server.address,
            "--upstream",
            cluster.url.removeprefix("http://"),
            "--delay-ms",
            "100",
        ]
    )
    proxied_url = "http://" + proxy.wait_for(r"delayproxy ready: (\S+)", 30)[1]
    rows = {}
    for name, url in (("direct", cluster.url), ("proxied", proxied_url)):
        master = cluster.start("--step-time", "4", levels="4", url=url, out=tmp_path / name)
        assert master.wait(120) == 0, master.output
        rows[name] = [row for row in read_rows(tmp_path / name / "requests.csv") if row["ok"] == "1"]
    cluster.simulator.stop()  # flushes its request log
    served = read_request_log(str(log))
    tpot_gap = {}
    for name, ok_rows in rows.items():
        assert ok_rows and all(row["request_id"] in served for row in ok_rows)
        client_tpot, server_tpot = [], []
        for row in ok_rows:
            record, sent, tokens = served[row["request_id"]], float(row["start_time"]), int(row["completion_tokens"])
            first_token, ended = sent + float(row["ttft_s"]), sent + float(row["e2e_s"])
            if name == "proxied":  # each leg through the proxy waits its 100 ms
                assert record["arrival"] - sent >= 0.1 and first_token - record["first"] >= 0.1, (row, record)
                assert ended - record["last"] >= 0.1, (row, record)
            client_tpot.append(float(row["tpot_s"]))
            server_tpot.append((record["last"] - record["first"]) / (tokens - 1))
        tpot_gap[name] = statistics.median(client_tpot) - statistics.median(server_tpot)
    print(f"client tpot p50 minus the server's: {tpot_gap}")
    assert all(abs(gap) < 0.001 for gap in tpot_gap.values()), tpot_gap  # per-token timing untouched


def test_without_root_the_host_tests_skip_with_the_reason(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert netns_unavailable() == "network namespaces need root"
