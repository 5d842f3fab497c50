"""A runner stopped mid-level by SIGTERM, SIGHUP or SIGKILL leaves nothing running: its Locust master, its workers
and its simulator end (checked by PID), and the server sees no request after them; stopped by SIGTERM or SIGHUP it
also closes the run folder as partial and writes the report of what it measured."""

import json
import signal
import socket
import sys
import time
from pathlib import Path

import pytest

from benchmarks.harness import scrape
from tests.helpers import wait_until

LEVEL = ["--locust-arg=--levels=4", "--locust-arg=--step-time=120", "--locust-arg=--output-tokens=64"]
QUIET_S = 5  # no request may reach the server this long after the runner's processes are gone


def descendants(pid: int) -> dict[int, str]:
    """Every process below ``pid`` (children of children too), each with its start time (/proc/PID/stat field 22),
    so that a PID reused later is not mistaken for it."""
    found: dict[int, str] = {}
    parents = {pid}
    for _ in range(10):  # runner -> simulator, master, workers: a few generations at most
        stats = [stat(path.name) for path in Path("/proc").iterdir() if path.name.isdigit()]
        children = {int(fields[0]): fields[21] for fields in stats if fields and int(fields[3]) in parents}
        children = {child: start for child, start in children.items() if child not in found}
        if not children:
            break
        found |= children
        parents = set(children)
    return found


def stat(pid: str) -> list[str]:
    """The fields of /proc/PID/stat ([] once it is gone), the command's name (field 2) as one field."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return []
    name_end = text.rindex(")")
    return [pid, text[text.index("(") + 1 : name_end], *text[name_end + 2 :].split()]


def alive(processes: dict[int, str]) -> dict[int, str]:
    """Those of ``processes`` still running (a zombie waiting for its reaper has ended)."""
    return {
        pid: start
        for pid, start in processes.items()
        if (fields := stat(str(pid))) and fields[21] == start and fields[2] != "Z"
    }


def server_state(url: str) -> tuple[float, ...]:
    """What changes when a request reaches the simulator: its running and waiting requests, its finished ones, and
    the HTTP requests it answered."""
    metrics = scrape(url)

    def total(prefix: str) -> float:
        return sum(value for name, value in metrics.items() if name.startswith(prefix))

    return (
        total("vllm:num_requests_running"),
        total("vllm:num_requests_waiting"),
        total("vllm:request_success_total"),
        total("http_requests_total"),
    )


@pytest.mark.parametrize(
    ("signum", "embedded"),
    [(signal.SIGTERM, False), (signal.SIGHUP, False), (signal.SIGKILL, False), (signal.SIGKILL, True)],
    ids=["SIGTERM", "SIGHUP", "SIGKILL", "SIGKILL-embedded-simulator"],
)
def test_a_stopped_runner_leaves_no_process_and_no_load(simulator, processes, tmp_path, signum, embedded):
    out, log = tmp_path / "out", tmp_path / "runner.log"
    target = [] if embedded else ["--target", simulator("--profile", "cpu-tiny").url]
    command = [sys.executable, "-m", "vllm_stress", "run", "--scenario", "smoke", "--workers", "2", *target]
    runner = processes([*command, "--out", out, *LEVEL], log)
    assert wait_until(lambda: "holding" in log.read_text(), timeout=120), log.read_text()
    started = descendants(runner.pid)
    assert len(started) >= 3 + embedded, started  # the master and two workers (and the simulator)

    runner.send_signal(signum)
    sent = time.monotonic()
    assert wait_until(lambda: not alive(started), timeout=60), (alive(started), log.read_text()[-3000:])
    children_gone_s = time.monotonic() - sent
    code = runner.wait(timeout=120)
    print(f"{signal.Signals(signum).name}: {len(started)} processes gone {children_gone_s:.1f} s after the signal")
    meta = json.loads((out / "run-1" / "run.json").read_text())
    assert meta["complete"] is False  # run.json says partial
    if signum != signal.SIGKILL:  # stopped by the runner: the master closed the run folder, the report is written
        assert meta["ended"], meta
        assert code == 128 + signum, log.read_text()[-3000:]
        assert (out / "report" / "report.md").is_file(), log.read_text()[-3000:]
    if embedded:
        return  # the server was among the processes that ended
    url = target[1]
    assert wait_until(lambda: server_state(url)[:2] == (0, 0), timeout=30)  # the aborted streams are freed
    before = server_state(url)
    time.sleep(QUIET_S)
    assert server_state(url) == before


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_stopped_worker_command_leaves_no_worker_process(processes, tmp_path, signum):
    """`vllm-stress worker` starts its Locust workers once something listens at the master's address (here a bare
    socket: they wait there for their locustfiles); stopped or killed, it leaves none of them running."""
    log = tmp_path / "worker.log"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = str(listener.getsockname()[1])
        command = [sys.executable, "-m", "vllm_stress", "worker", "--master-host", "127.0.0.1", "--master-port", port]
        worker = processes([*command, "--processes", "2"], log)
        assert wait_until(lambda: len(descendants(worker.pid)) >= 2, timeout=60), log.read_text()
        started = descendants(worker.pid)
        worker.send_signal(signum)
        code = worker.wait(timeout=60)
    assert wait_until(lambda: not alive(started), timeout=30), (alive(started), log.read_text()[-3000:])
    assert code == (0 if signum != signal.SIGKILL else -signal.SIGKILL), log.read_text()[-3000:]
