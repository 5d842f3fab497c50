"""Faults of the target and of the suite's own processes, injected for real: every request started is a row, every
row is a success or a failure of a stable class, and an interrupted run keeps what it measured.

The target's faults come from ``tests/faultserver.py`` (by path prefix) or from the simulator (killed with SIGKILL
and restarted on the same port); the suite's from signals to the Locust master, workers and local runner.
"""

from __future__ import annotations

import math
import signal
import time
from pathlib import Path

import pytest

from benchmarks.harness import read_rows
from tests.faultserver import FAULTS, SLOW_HEADERS_S
from tests.helpers import (
    LOCUST,
    SHORT,
    SLOW_SIM,
    analyse,
    locust_stats,
    run_json,
    served_as_rows,
    server_completed,
    start_master_and_workers,
    wait_until,
)
from vllm_stress.scenarios.run.runner import free_port

TIMEOUT_S = 1.0
EXPECTED = {  # fault -> the rows' error column ("" = success)
    "ok": "",
    "http400": "HTTP 400",
    "http401": "HTTP 401",
    "http404": "HTTP 404",
    "http429": "HTTP 429",
    "http500": "HTTP 500",
    "http503": "HTTP 503",
    "cut": "StreamTruncated",
    "no-done": "StreamTruncated",
    "malformed-json": "MalformedJSON",
    "malformed-sse": "MalformedSSE",
    "stream-error": "StreamError InternalServerError",
    "hang": "Timeout",
    "stall": "Timeout",
    "slow-headers": "",
}


def row_count(path: Path) -> int:
    """Complete rows in a requests.csv that may still be written."""
    return len(rows_so_far(path))


def rows_so_far(path: Path) -> list[dict]:
    """The complete rows of a requests.csv that may not exist yet or be still written."""
    return [r for r in read_rows(path) if r.get("name")] if path.is_file() else []


def locust_counts(prefix: Path) -> tuple[dict, dict[str, int]]:
    """Locust's own count of the chat requests ({column: value}) and of its failures by class."""
    failures = {
        r["Error"].removeprefix("CatchResponseError('").removesuffix("')"): int(r["Occurrences"])
        for r in read_rows(Path(f"{prefix}_failures.csv"))
    }
    return locust_stats(prefix)["POST", "chat"], failures


def assert_accounted(rows: list[dict], prefix: Path) -> None:
    """Locust counted exactly the rows: as many requests, as many failures, the same classes."""
    stats, failures = locust_counts(prefix)
    failed = [r for r in rows if r["ok"] == "0"]
    assert int(stats["Request Count"]) == len(rows) and int(stats["Failure Count"]) == len(failed)
    assert failures == {error: sum(r["error"] == error for r in failed) for error in {r["error"] for r in failed}}


# --- the target's faults ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def matrix_run(fault_server, run_locust, tmp_path_factory):
    """One user through every fault in turn (one run for the whole matrix); the current request finishes at the end
    (--stop-timeout), so every request the server received is a finished row."""
    prefix = "/cycle/" + ",".join(FAULTS)
    out = tmp_path_factory.mktemp("matrix") / "run"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        fault_server.url + prefix,
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "6s",
        "--stop-timeout",
        "5",
        "--request-timeout",
        str(TIMEOUT_S),
        "--results-dir",
        str(out),
        "--csv",
        str(out / "locust"),
        *SHORT,
        timeout=60,
    )
    return proc, out, read_rows(out / "requests.csv"), fault_server.received[prefix]


@pytest.mark.parametrize("fault", FAULTS)
def test_fault_matrix(matrix_run, fault):
    proc, out, rows, received = matrix_run
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]  # 1: there were failures
    assert len(rows) == len(received) and set(received) == set(FAULTS)  # one row per request the server got
    assert_accounted(rows, out / "locust")
    mine = [row for row, got in zip(rows, received, strict=True) if got == fault]  # one user: rows in arrival order
    assert [r["error"] for r in mine] == [EXPECTED[fault]] * len(mine)
    assert all(r["ok"] == ("0" if EXPECTED[fault] else "1") for r in mine)
    if fault in ("hang", "stall"):  # --request-timeout fired, and the user went on to the next request
        assert all(TIMEOUT_S <= float(r["e2e_s"]) < TIMEOUT_S + 0.5 for r in mine)
    if fault == "slow-headers":
        assert all(float(r["ttft_s"]) >= SLOW_HEADERS_S for r in mine)
    if fault.startswith("http"):
        assert all(r["status"] == fault[4:] for r in mine)


@pytest.mark.parametrize("fault", ["ok", "no-done"])
def test_sdk_user_follows_the_same_stream_rules(fault_server, run_locust, tmp_path, fault):
    """The SDK consumes [DONE] itself and ends its iteration the same way without it: the SDK user still knows."""
    out = tmp_path / fault
    proc = run_locust(
        "-f",
        "locustfiles/sdk.py",
        "-H",
        f"{fault_server.url}/fault/{fault}",
        "-u",
        "1",
        "-r",
        "1",
        "-t",
        "2s",
        "--stop-timeout",
        "5",
        "--results-dir",
        str(out),
        *SHORT,
        timeout=60,
    )
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    rows = read_rows(out / "requests.csv")
    assert rows and {r["error"] for r in rows} == {EXPECTED[fault]}


def test_server_not_running_at_start(run_locust, tmp_path):
    port = free_port()
    out = tmp_path / "run"
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        f"http://127.0.0.1:{port}",
        "-u",
        "1",
        "-t",
        "5s",
        "--results-dir",
        str(out),
        *SHORT,
        timeout=30,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "/ERROR/" in line]
    assert len(errors) == 1 and errors[0].endswith(
        f"cannot reach the server: GET http://127.0.0.1:{port}/v1/models: Connection refused"
    )
    assert row_count(out / "requests.csv") == 0


def test_wrong_model_is_refused_before_any_request(fault_server, run_locust, tmp_path):
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        fault_server.url + "/fault/ok-wrong-model",
        "-u",
        "1",
        "-t",
        "5s",
        "--model",
        "no-such-model",
        "--results-dir",
        str(tmp_path / "run"),
        *SHORT,
        timeout=30,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "model 'no-such-model' is not served by" in proc.stderr and "(it serves: fault-model)" in proc.stderr
    assert fault_server.chat_requests("/fault/ok-wrong-model") == 0


def test_server_killed_and_restarted_on_the_same_port(simulator, processes, tmp_path):
    port = free_port()
    first = simulator(*SLOW_SIM, "--port", str(port))
    out = tmp_path / "run"
    locust = processes(
        [
            *LOCUST,
            "-f",
            "locustfiles/chat.py",
            "-H",
            first.url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "8s",
            "--stop-timeout",
            "5",
            "--request-timeout",
            "5",
            "--results-dir",
            str(out),
            "--csv",
            str(out / "locust"),
            *SHORT,
        ],
        tmp_path / "locust.log",
    )
    assert wait_until(lambda: row_count(out / "requests.csv") >= 8, timeout=15)
    killed = time.time()
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    time.sleep(1.5)  # the server is down: requests are refused
    second = simulator(*SLOW_SIM, "--port", str(port))
    down_s = time.time() - killed
    assert locust.wait(timeout=30) == 1  # 1: there were failures
    completed = server_completed(second.url)
    log = (tmp_path / "locust.log").read_text()
    assert "Traceback" not in log
    rows = read_rows(out / "requests.csv")
    errors = {r["error"] for r in rows}
    assert errors <= {"", "ConnectionRefused", "StreamTruncated"} and "ConnectionRefused" in errors, errors
    refused = sum(r["error"] == "ConnectionRefused" for r in rows)
    assert refused <= 4 * (down_s / 0.5 + 1)  # each user pauses after a refusal: no tight loop while the server is down
    after = [r for r in rows if float(r["start_time"]) > killed]
    assert any(r["ok"] == "1" for r in after)  # the run went on and recovered
    assert sum(r["ok"] == "1" for r in after) == completed  # every success after the kill is one the new server served
    assert_accounted(rows, out / "locust")


# --- interrupted runs -------------------------------------------------------------------------------------------


def check_partial_run(out: Path, url: str, tmp_path: Path) -> list[dict]:
    """Every request the server saw is a row, Locust's CSVs exist, run.json and the analysis say partial."""
    rows = read_rows(out / "requests.csv")
    assert wait_until(lambda: served_as_rows(server_completed(url), rows), timeout=5), (
        server_completed(url),
        len(rows),
    )
    assert {r["error"] for r in rows} <= {"", "Aborted"}
    assert all((out / f"locust_{name}.csv").is_file() for name in ("stats", "failures", "exceptions"))
    meta = run_json(out)
    assert meta["complete"] is False and meta["ended"] is not None
    assert analyse(out, tmp_path / "report")["partial"] is True
    return rows


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_interrupted_local_run_keeps_every_row(simulator, processes, tmp_path, signum):
    sim = simulator(*SLOW_SIM)
    out = tmp_path / "run"
    locust = processes(
        [
            *LOCUST,
            "-f",
            "locustfiles/chat.py",
            "-H",
            sim.url,
            "-u",
            "4",
            "-r",
            "4",
            "-t",
            "60s",
            "--results-dir",
            str(out),
            "--csv",
            str(out / "locust"),
            *SHORT,
        ],
        tmp_path / "locust.log",
    )
    assert wait_until(lambda: row_count(out / "requests.csv") >= 12, timeout=15)
    locust.send_signal(signum)
    assert locust.wait(timeout=15) == 0  # the requests aborted at the stop are no failures (check_partial_run)
    assert "Traceback" not in (tmp_path / "locust.log").read_text()
    check_partial_run(out, sim.url, tmp_path)


def test_interrupted_master_keeps_the_workers_rows(simulator, processes, tmp_path):
    sim = simulator(*SLOW_SIM)
    out, master, workers, _ = start_master_and_workers(
        processes, tmp_path, "locustfiles/chat.py", sim.url, 2, "-u", "6", "-r", "6", "-t", "60s"
    )
    assert wait_until(lambda: len({r["worker"] for r in rows_so_far(out / "requests.csv")}) == 2, timeout=20)
    master.send_signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0  # the requests aborted at the stop are no failures (check_partial_run)
    assert all(worker.wait(timeout=10) == 0 for worker in workers)  # told to quit by the master
    rows = check_partial_run(out, sim.url, tmp_path)
    assert len({r["worker"] for r in rows}) == 2


# --- distributed faults -----------------------------------------------------------------------------------------


def test_worker_killed_mid_run_is_named_and_the_master_goes_on(simulator, processes, tmp_path):
    sim = simulator(*SLOW_SIM)
    out, master, (first, _), _ = start_master_and_workers(
        processes, tmp_path, "locustfiles/chat.py", sim.url, 2, "-u", "6", "-r", "6", "-t", "60s"
    )
    assert wait_until(lambda: len({r["worker"] for r in rows_so_far(out / "requests.csv")}) == 2, timeout=20)
    first.kill()
    killed = time.time()
    assert wait_until(lambda: run_json(out)["lost_workers"], timeout=20)  # Locust's heartbeat liveness
    # a worker report from the survivor after the loss: its rows of requests started since
    assert wait_until(lambda: any(float(r["start_time"]) > killed + 1 for r in rows_so_far(out / "requests.csv")), 20)
    master.send_signal(signal.SIGTERM)
    assert master.wait(timeout=15) == 0  # the lost worker is no failure, nor are the requests aborted at the stop
    rows = read_rows(out / "requests.csv")
    survivors = {r["worker"] for r in rows if float(r["start_time"]) > killed + 1}
    (lost_id,) = {r["worker"] for r in rows} - survivors
    assert len(survivors) == 1  # the other worker went on
    (lost,) = run_json(out)["lost_workers"]
    assert lost["worker"] == lost_id and killed - 3 < lost["last_seen"] <= killed
    summary = analyse(out, tmp_path / "report")
    assert [w["worker"] for w in summary["lost_workers"]] == [lost_id]
    report = (tmp_path / "report" / "report.md").read_text()
    assert "Lost workers" in report and lost_id in report


def test_late_worker_rows_carry_the_level(simulator, processes, tmp_path):
    sim = simulator(*SLOW_SIM)
    out, master, _, worker = start_master_and_workers(
        processes,
        tmp_path,
        "locustfiles/chat.py,scenarios/shape.py",
        sim.url,
        1,
        "--levels",
        "2,4",
        "--step-time",
        "2",
        "--warmup",
        "0",
        "--ramp-time",
        "0.5",
    )
    assert wait_until(lambda: row_count(out / "requests.csv") >= 1, timeout=20)
    joined = time.time()
    late = worker("late")  # joins during level 2 (Locust gives it users at once)
    assert master.wait(timeout=30) == 0 and late.wait(timeout=10) == 0
    assert "Traceback" not in (tmp_path / "late.log").read_text()
    rows = read_rows(out / "requests.csv")
    first_start: dict[str, float] = {}
    for r in rows:
        first_start[r["worker"]] = min(first_start.get(r["worker"], math.inf), float(r["start_time"]))
    assert len(first_start) == 2 and max(first_start.values()) > joined  # the late worker ran requests
    level_4 = float(read_rows(out / "levels.csv")[1]["ramp_start"])
    for r in rows:  # the level when the request started (the level message takes a moment to reach a worker)
        start = float(r["start_time"])
        assert r["users"] == ("2" if start < level_4 else "4") or abs(start - level_4) < 0.1, r
    assert wait_until(lambda: served_as_rows(server_completed(sim.url), rows), timeout=5), server_completed(sim.url)


def test_workers_quit_by_themselves_when_the_master_dies(simulator, processes, tmp_path):
    sim = simulator(*SLOW_SIM)
    out, master, workers, _ = start_master_and_workers(
        processes, tmp_path, "locustfiles/chat.py", sim.url, 2, "-u", "4", "-r", "4", "-t", "60s"
    )
    assert wait_until(lambda: row_count(out / "requests.csv") >= 4, timeout=20)
    master.kill()
    killed = time.time()
    for worker in workers:
        worker.wait(timeout=25)
    assert time.time() - killed < 15 + 5  # base.py's MASTER_HEARTBEAT_TIMEOUT, then the worker's own shutdown
    logs = [(tmp_path / f"worker{i}.log").read_text() for i in range(2)]
    assert all("Didn't get heartbeat from master" in log and "Traceback" not in log for log in logs)
    rows = read_rows(out / "requests.csv")  # what the master had received is on disk, whole rows
    assert rows and all(r["name"] == "chat" for r in rows)
    assert run_json(out)["complete"] is False
    summary = analyse(out, tmp_path / "report")  # the folder of a master killed with SIGKILL is analysable as it is
    assert summary["partial"] is True and 0 < sum(level["requests"] for level in summary["levels"]) <= len(rows)
