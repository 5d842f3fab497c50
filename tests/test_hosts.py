"""Master, workers and server on separate hosts (network namespaces on a bridge), run with the commands of
docs/guides/distributed.md."""

import json
import os
import statistics
import subprocess
import sys
import time
from collections import Counter

import pytest

from benchmarks.harness import read_rows
from tests.helpers import analyse
from tests.netns import guide_commands, netns_unavailable, substitute
from vllm_stress.simulator.process import READY_LINE

WORKER_HOSTS = ("worker1", "worker2")
PROCESSES_PER_HOST = os.cpu_count()  # the guide's worker command's --processes, set to this machine's cores
RAMP = ["--step-time", "6", "--warmup", "1", "--ramp-time", "1", "--expect-workers-max-wait", "60"]


class Cluster:
    """The simulator, the master and two worker hosts, each in its own namespace."""

    def __init__(self, network, out) -> None:
        self.server, self.master_host = network.add_host("server"), network.add_host("master")
        self.worker_hosts = [network.add_host(name) for name in WORKER_HOSTS]
        self.out = out
        simulator = self.server.start(
            [
                sys.executable,
                "-m",
                "vllm_stress.simulator",
                "--host",
                self.server.address,
                "--port",
                "0",
                "--profile",
                "cpu-tiny",
            ]
        )
        self.url = simulator.wait_for(READY_LINE.pattern, 60)["url"]

    def start(self, *extra: str, levels: str = "2,4,6", url: str = "", out=None):
        """The master and the workers, started with the guide's commands (placeholders filled in), plus ``extra``
        for the master; returns the master's process."""
        master_args, worker_args = guide_commands()
        out = out or self.out
        options = {
            "--config": "scenarios/configs/smoke.conf",
            "-H": url or self.url,
            "--results-dir": str(out),
            "--csv": str(out / "locust"),
            "--expect-workers": str(len(WORKER_HOSTS) * PROCESSES_PER_HOST),
            "--master-bind-host": self.master_host.address,
        }
        locust = [sys.executable, "-m", "locust"]
        master = self.master_host.start(
            locust + substitute(master_args, options, {}) + ["--levels", levels, *RAMP, *extra]
        )
        master.wait_for(r"Waiting for workers to be ready", 60)  # it listens
        self.workers = [self.start_worker(host) for host in self.worker_hosts]
        return master

    def start_worker(self, host):
        _, worker_args = guide_commands()
        options = {"--master-host": self.master_host.address, "--processes": str(PROCESSES_PER_HOST)}
        return host.start([sys.executable, "-m", "locust", *substitute(worker_args, options, {})])

    def server_completed(self) -> int:
        return int(
            self.server.python(f"from tests.helpers import server_completed; print(server_completed({self.url!r}))")
        )


def test_readme_ramp_across_four_hosts(network, tmp_path):
    cluster = Cluster(network, tmp_path / "run")
    master = cluster.start()
    assert master.wait(180) == 0, master.output
    for worker in cluster.workers:  # the master told them to quit
        assert worker.wait(30) == 0, worker.output
    rows = read_rows(tmp_path / "run" / "requests.csv")
    assert len(rows) == cluster.server_completed() > 0  # every request the server served is a row on the master
    assert {row["users"] for row in rows} == {"2", "4", "6"}
    by_host = Counter(row["worker"].split("_")[0] for row in rows)
    assert set(by_host) == set(WORKER_HOSTS), by_host  # worker ids carry their host's name
    processes = {row["worker"] for row in rows}
    assert len(processes) == len(WORKER_HOSTS) * PROCESSES_PER_HOST
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    assert meta["complete"] is True and meta["lost_workers"] == []
    assert meta["server_requests"] == len(rows) and meta["unaccounted_requests"] == 0


@pytest.mark.parametrize("comes_back", [False, True], ids=["stays-cut", "comes-back"])
def test_a_worker_host_cut_off_mid_level_is_accounted_and_the_run_completes(network, tmp_path, comes_back):
    """worker2's link goes down in level 1: the master marks its processes lost, worker1 carries on, worker2 quits
    after 15 s without its master; the server's count minus the rows is the run's unaccounted figure. Either its
    link stays down to the end (its requests in flight and unreported rows are unaccounted), or it comes back and
    the host joins again as new worker processes (its last rows may then still arrive: TCP retransmits them)."""
    cluster = Cluster(network, tmp_path / "run")
    master = cluster.start("--step-time", "14", levels="4,8,12")
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
    assert len(rows) + meta["unaccounted_requests"] == served
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
    assert wait_or_dump(master, 180) == 1  # Locust's exit code for a run with failures
    print(f"master exited {time.monotonic() - cut:.1f} s after the cut")
    rows = read_rows(tmp_path / "run" / "requests.csv")
    errors = Counter(row["error"] for row in rows)
    assert errors["Timeout"] >= 4 and set(errors) <= {"", "Timeout", "Aborted"}, errors
    failures = read_rows(tmp_path / "run" / "locust_failures.csv")
    assert any("Timeout" in row["Error"] for row in failures)  # the same class in Locust's failures table
    print(f"rows {len(rows)}: {dict(errors)}")


def wait_or_dump(process, timeout: float) -> int:
    """The process's exit code; its last output printed when it does not exit in time."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        print(process.output[-6000:])
        raise


def test_added_latency_shifts_ttft_by_it_and_no_more(network, tmp_path):
    """The same level direct and through a proxy adding 100 ms each way: TTFT and e2e grow by the round trip's
    200 ms, the time per output token does not."""
    cluster = Cluster(network, tmp_path / "direct")
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
    timings = {}
    for name, url in (("direct", cluster.url), ("proxied", proxied_url)):
        master = cluster.start("--step-time", "8", levels="4", url=url, out=tmp_path / name)
        assert master.wait(120) == 0, master.output
        rows = [row for row in read_rows(tmp_path / name / "requests.csv") if row["ok"] == "1"]
        timings[name] = {
            field: statistics.median([float(row[field]) for row in rows]) for field in ("ttft_s", "tpot_s", "e2e_s")
        }
    shift = {field: timings["proxied"][field] - timings["direct"][field] for field in timings["direct"]}
    print(f"direct {timings['direct']}, proxied {timings['proxied']}, shift {shift}")
    assert 0.18 < shift["ttft_s"] < 0.25 and 0.18 < shift["e2e_s"] < 0.25
    assert abs(shift["tpot_s"]) < 0.001  # per-token timing untouched (a delay per chunk that added up would show)


def test_without_root_the_host_tests_skip_with_the_reason(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert netns_unavailable() == "network namespaces need root"
