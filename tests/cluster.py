"""The cluster of docs/guides/distributed.md for the host tests (tests/test_hosts.py, tests/test_hosts_cut.py): the
simulator, the master and two worker hosts, each in its own network namespace, started with the guide's commands."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.netns import guide_commands, substitute
from vllm_stress.simulator.process import READY_LINE

WORKER_HOSTS = ("worker1", "worker2")
PROCESSES_PER_HOST = os.cpu_count()  # the guide's worker command's --processes, set to this machine's cores
RAMP = ["--step-time", "6", "--warmup", "1", "--ramp-time", "1", "--expect-workers-max-wait", "60"]


class Cluster:
    """The simulator, the master and two worker hosts, each in its own namespace."""

    def __init__(self, network, out, *simulator_args: str) -> None:
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
                *simulator_args,
            ]
        )
        self.simulator = simulator
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


def wait_or_dump(process, timeout: float) -> int:
    """The process's exit code; its last output printed when it does not exit in time."""
    try:
        return process.wait(timeout)
    except subprocess.TimeoutExpired:
        print(process.output[-6000:])
        raise
