"""A multi-host run started with `vllm-stress run --master-bind-host` on the master host and `vllm-stress worker` on
each worker host, nothing else: the workers serve every repeat, the master writes every run folder and the report,
and the workers end by themselves once no master comes back (hosts are network namespaces, tests/netns.py)."""

import sys
from collections import Counter

from benchmarks.harness import read_rows
from tests.helpers import served_as_rows
from vllm_stress.simulator.process import READY_LINE

WORKER_HOSTS = ("worker1", "worker2")
PROCESSES_PER_HOST = 1
# A worker command ends this long after it last saw a master (it looks every 5 s while its workers run, and again
# when they quit with their master). The next repeat's master listens some 3 s after the last one's workers quit
# here, more on a loaded machine; after the last repeat the test waits out this time.
MASTER_WAIT_S = 15
# one level of a user per worker host, held 1 s: the runs are to be served, not measured
RAMP = [
    "--levels",
    str(len(WORKER_HOSTS) * PROCESSES_PER_HOST),
    "--locust-arg=--step-time=1",
    "--locust-arg=--warmup=0",
]
VLLM_STRESS = [sys.executable, "-m", "vllm_stress"]


def test_run_and_worker_commands_alone_serve_every_repeat(network, tmp_path):
    server, master_host = network.add_host("server"), network.add_host("master")
    worker_hosts = [network.add_host(name) for name in WORKER_HOSTS]
    simulator = server.start(
        [
            sys.executable,
            "-m",
            "vllm_stress.simulator",
            "--host",
            server.address,
            "--port",
            "0",
            "--profile",
            "cpu-tiny",
        ]
    )
    url = simulator.wait_for(READY_LINE.pattern, 60)["url"]
    out = tmp_path / "out"
    runner = master_host.start(
        [
            *VLLM_STRESS,
            "run",
            "--scenario",
            "smoke",
            "--target",
            url,
            "--repeats",
            "2",
            *RAMP,
            "--out",
            str(out),
            "--master-bind-host",
            master_host.address,
            "--expect-workers",
            str(len(WORKER_HOSTS) * PROCESSES_PER_HOST),
        ]
    )
    worker_cmd = ["worker", "--master-host", master_host.address, "--processes", str(PROCESSES_PER_HOST)]
    workers = [host.start([*VLLM_STRESS, *worker_cmd, "--master-wait", str(MASTER_WAIT_S)]) for host in worker_hosts]

    assert runner.wait(300) == 0, runner.output[-6000:]
    assert sorted(path.name for path in out.iterdir()) == ["report", "run-1", "run-2"]
    assert (out / "report" / "report.md").is_file()
    rows = {run: read_rows(out / run / "requests.csv") for run in ("run-1", "run-2")}
    for run, run_rows in rows.items():
        by_host = Counter(row["worker"].split("_")[0] for row in run_rows)  # Locust's ids: hostname_uuid
        assert set(by_host) == set(WORKER_HOSTS), (run, by_host)
        print(f"{run}: {len(run_rows)} rows, by host {dict(sorted(by_host.items()))}")
        assert len({row["worker"] for row in run_rows}) == len(WORKER_HOSTS) * PROCESSES_PER_HOST
    # each repeat's worker processes are new ones: Locust workers quit with their master
    assert not {row["worker"] for row in rows["run-1"]} & {row["worker"] for row in rows["run-2"]}
    completed = int(server.python(f"from tests.helpers import server_completed; print(server_completed({url!r}))"))
    assert served_as_rows(completed, [row for run_rows in rows.values() for row in run_rows])  # each served is a row
    for worker in workers:  # no master comes back: each worker command ends by itself
        assert worker.wait(MASTER_WAIT_S + 60) == 0, worker.output[-3000:]


def test_expect_workers_needs_the_address_they_reach(tmp_path, capsys):
    from vllm_stress.scenarios.cli import main

    assert main(["run", "--scenario", "smoke", "--expect-workers", "2", "--out", str(tmp_path / "out")]) == 2
    assert "--expect-workers needs --master-bind-host" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
