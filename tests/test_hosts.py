"""Master, workers and server on separate hosts (network namespaces on a bridge), run with the README's commands."""

import json
import os
import sys
from collections import Counter

from simulator.process import READY_LINE
from tests.conftest import read_rows
from tests.netns import readme_commands, substitute

WORKER_HOSTS = ("worker1", "worker2")
PROCESSES_PER_HOST = os.cpu_count()  # the README's workers run --processes -1
RAMP = ["--levels", "2,4,6", "--step-time", "6", "--warmup", "1", "--ramp-time", "1", "--expect-workers-max-wait", "60"]


class Cluster:
    """The simulator, the master and two worker hosts, each in its own namespace."""

    def __init__(self, network, out) -> None:
        self.server, self.master_host = network.add_host("server"), network.add_host("master")
        self.worker_hosts = [network.add_host(name) for name in WORKER_HOSTS]
        self.out = out
        simulator = self.server.start([sys.executable, "-m", "simulator", "--host", self.server.address, "--port", "0",
                                       "--profile", "cpu-tiny"])
        self.url = simulator.wait_for(READY_LINE.pattern, 60)["url"]

    def start(self, *extra: str):
        """The master and the workers, started with the README's commands (placeholders filled in), plus ``extra``
        for the master; returns the master's process."""
        master_args, worker_args = readme_commands()
        options = {"--config": "scenarios/configs/smoke.conf", "-H": self.url, "--results-dir": str(self.out),
                   "--csv": str(self.out / "locust"), "--expect-workers": str(len(WORKER_HOSTS) * PROCESSES_PER_HOST)}
        locust = [sys.executable, "-m", "locust"]
        master = self.master_host.start(locust + substitute(master_args, options, {}) + [*RAMP, *extra])
        master.wait_for(r"[Ww]aiting for workers|expect", 30)
        self.workers = [host.start(locust + substitute(worker_args, {}, {"MASTER": self.master_host.address}))
                        for host in self.worker_hosts]
        return master

    def server_completed(self) -> int:
        return int(self.server.python(f"from tests.conftest import server_completed; print(server_completed({self.url!r}))"))


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
