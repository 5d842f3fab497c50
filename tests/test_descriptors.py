"""File descriptors: a load process raises its soft RLIMIT_NOFILE to the hard limit, and a level its processes
cannot open is refused in one line before its users connect (core/descriptors.py, master/fdlimits.py)."""

import resource

from tests.helpers import LOCUST, SHORT, SLOW_SIM, read_rows
from vllm_stress.core import descriptors
from vllm_stress.scenarios.run.runner import free_port


def test_a_level_is_refused_when_a_process_share_passes_the_limit():
    # 128 for the process, one per user: 1,000 users on 4 workers is 250 each, 378 descriptors
    assert descriptors.refusal(1000, 4, 378) == ""
    assert descriptors.refusal(1000, 4, 377) == (
        "level 1000 users needs about 378 file descriptors in each of its 4 worker processes, the limit is 377 "
        "(ulimit -n; raise the hard limit, or add workers)"
    )
    assert descriptors.refusal(1001, 4, 378).startswith("level 1001 users needs about 379 ")  # 251 on one of them
    assert "in its load process, the limit is 200 " in descriptors.refusal(100, 1, 200)


def test_users_spread_over_replicas_need_a_descriptor_per_replica():
    # 5,000 users per worker sending to two replicas: 128 + 2 x 5,000 = 10,128 each
    assert descriptors.refusal(20000, 4, 10128, replicas=2) == ""
    assert descriptors.refusal(20000, 4, 10127, replicas=2).startswith(
        "level 20000 users needs about 10128 file descriptors in each of its 4 worker processes, the limit is 10127 "
    )


def test_the_soft_limit_is_raised_to_the_hard_one():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    lowered = min(soft, 64)
    resource.setrlimit(resource.RLIMIT_NOFILE, (lowered, hard))
    try:
        assert descriptors.raise_limit() == hard
        assert resource.getrlimit(resource.RLIMIT_NOFILE) == (hard, hard)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_level_beyond_the_workers_limit_is_refused_in_one_line(simulator, processes, tmp_path):
    """Two workers whose hard limit is 200 descriptors (their soft 100, raised at start): 10 users run, 300 users
    (150 each, 278 descriptors) are refused by the master before any of them connects."""
    sim = simulator(*SLOW_SIM)
    out = tmp_path / "run"
    common = [*LOCUST, "-f", "locustfiles/chat.py,scenarios/shape.py", "-H", sim.url, *SHORT]
    ramp = ["--levels", "10,300", "--step-time", "2", "--warmup", "0"]
    port = str(free_port())
    master = processes(
        [*common, "--master", "--master-bind-host", "127.0.0.1", "--master-bind-port", port]
        + ["--expect-workers", "2", "--results-dir", str(out), *ramp],
        tmp_path / "master.log",
    )
    low = ["prlimit", "--nofile=100:200"]
    workers = [
        processes([*low, *common, "--worker", "--master-port", port], tmp_path / f"worker{i}.log") for i in range(2)
    ]
    assert master.wait(timeout=120) == 2
    log = (tmp_path / "master.log").read_text()
    errors = [line for line in log.splitlines() if "/ERROR/" in line]
    assert errors == [errors[0]] and errors[0].endswith(
        "level 300 users needs about 278 file descriptors in each of its 2 worker processes, the limit is 200 "
        "(ulimit -n; raise the hard limit, or add workers)"
    ), errors
    for worker in workers:
        worker.wait(timeout=60)
    assert all("Too many open files" not in (tmp_path / f"worker{i}.log").read_text() for i in range(2))
    users = {int(row["users"]) for row in read_rows(out / "requests.csv")}
    assert users == {10}  # no request was sent at the refused level
