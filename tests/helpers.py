"""Helpers the test modules share (no test module imports another). What the benchmarks use too is in
``benchmarks/harness.py``; the fixtures that start servers and Locust are in ``conftest.py``."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import configargparse
import pandas as pd

from benchmarks.harness import read_rows, scrape
from vllm_stress.analysis.cli import main as analysis_main
from vllm_stress.analysis.io.synthetic import closed_loop_rows, step_levels, write_run
from vllm_stress.client import options
from vllm_stress.client.sessionmodel import RecordedSession, subagents
from vllm_stress.core.schema import ABORTED, CANCELLED
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.api.requestlog import read_request_log

REPO = Path(__file__).resolve().parent.parent
NOWHERE = "http://127.0.0.1:1"  # nothing listens: runs given it must stop before contacting a server
LEVELS = step_levels([5, 10], hold_s=50.0)
LOCUST = [sys.executable, "-m", "locust"]
# runs whose checks hold each row to its sized request: no canaries, which are fixed questions of their own size
# (tests/test_canaries.py runs them, on by default)
NO_CANARIES = ["--canary-share=0"]
SHORT = ["--input-tokens", "16", "--output-tokens", "8", "--headless", "--only-summary", *NO_CANARIES]
SLOW_SIM = ["--profile", "cpu-tiny", "--set", "t_fixed=0.02"]  # ~0.2 s per request: few rows, little CPU


@dataclass
class Server:
    """A server under test: its base URL and the model it serves."""

    url: str
    model: str
    otlp_port: int = 0  # a real vLLM's: where it exports its request spans (OTLP/HTTP)
    log: str = ""  # a real vLLM's: the file its output goes to (its request log with --enable-log-requests)


def server_completed(url: str) -> int:
    """Requests the server finished, whatever their finish reason (vLLM's request_success_total)."""
    return int(sum(v for k, v in scrape(url).items() if k.startswith("vllm:request_success_total{")))


def served_as_rows(served: int, rows: list[dict]) -> bool:
    """Whether the server's count of finished requests is the rows': every row the client did not cut, and at most
    the rows it cut (the stop's aborts and the cancellations). vLLM 0.32, and the simulator as it, counts no client
    abort, but a stream cut while its last chunk was on its way was finished first."""
    cut = sum(row["error"] in (ABORTED, CANCELLED) for row in rows)
    return len(rows) - cut <= served <= len(rows)


def locust_stats(prefix: Path) -> dict[tuple[str, str], dict]:
    """Locust's own ``PREFIX_stats.csv`` (its --csv) by (Type, Name), e.g. ``("POST", "chat")``."""
    return {(r["Type"], r["Name"]): r for r in read_rows(Path(f"{prefix}_stats.csv"))}


def check_first_token_times(rows: list[dict], records: dict[str, dict], send_s: float = 0.002) -> None:
    """Each row's send is the server's kernel arrival within ``send_s`` (2 ms), and its first token never before the
    server's first output write (1 ms for the clocks); the median row's first token lies between the server's stamps
    before and after that write (within 1 ms). A row's first-token time is the arrival stamp of the read that carried
    it (vllm_stress/client/stream.py); a client descheduled on a loaded machine reads the first write with later
    ones, or late, which the median is held apart from."""
    after_send = []
    for row in rows:
        record = records[row["request_id"]]
        first_token = float(row["start_time"]) + float(row["ttft_s"])
        assert abs(float(row["start_time"]) - record["arrival"]) < send_s, (row, record)
        assert record["first"] - 0.001 <= first_token, (row, record)
        after_send.append(first_token - record["first_sent"])
    assert sorted(after_send)[len(after_send) // 2] <= 0.001, after_send


def wait_until(condition, timeout: float = 10.0, interval: float = 0.1):
    """Poll ``condition()`` until it is true or ``timeout`` passes; returns its last value."""
    deadline = time.monotonic() + timeout
    while not (result := condition()) and time.monotonic() < deadline:
        time.sleep(interval)
    return result


def refused(proc: subprocess.CompletedProcess, message: str) -> None:
    """Exit code 2, one ERROR line holding ``message``, no traceback."""
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if "/ERROR/" in line]
    assert len(errors) == 1 and message in errors[0], errors


def analyse(folder: Path, out: Path) -> dict:
    """``python -m analysis FOLDER --out OUT`` (in this process) and its summary.json."""
    assert analysis_main([str(folder), "--out", str(out)]) == 0
    return json.loads((out / "summary.json").read_text())


def run_cli(capsys, *args) -> tuple[int, str, str]:
    """``python -m analysis ARGS`` in this process: its exit code, stdout and stderr."""
    code = analysis_main([str(a) for a in args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def small_run(folder, model="m", loops=(5, 8), complete=True):
    """A synthetic run folder. Level 5: ``loops[0]`` users in a closed loop of 5 s requests (2,048 + 100 tokens)
    through its 50 s hold, so 20 output tok/s per user; level 10: ``loops[1]`` users."""
    parts = [
        closed_loop_rows(users, ramp_start, hold_end, 5.0, loops=n, completion_tokens=100)
        for (users, ramp_start, _, hold_end), n in zip(LEVELS, loops, strict=True)
    ]
    return write_run(folder, pd.concat(parts), LEVELS, meta={"model": model, "complete": complete})


def parsed_options(*args: str):
    """The suite's options (vllm_stress.client.options) as Locust parses them from ``args``, without Locust: with
    configargparse, which Locust's parser builds on (its ``env_var``)."""
    parser = configargparse.ArgumentParser()
    options.add_arguments(parser)
    return parser.parse_args(list(args))


def run_json(folder: Path) -> dict:
    return json.loads((folder / "run.json").read_text())


def start_master_and_workers(
    processes, tmp_path: Path, locustfile: str, url: str, workers: int, *args: str, headless: bool = True
):
    """A master (its run in ``tmp_path/run``, its log in ``master.log``) and ``workers`` workers on 127.0.0.1, with
    SHORT requests; ``headless=False``: the master's web UI starts the run by itself (``--autostart``) and stays up
    after it. Returns the run folder, the master, the workers and a function that starts one more worker."""
    out = tmp_path / "run"
    port = str(free_port())
    mode = SHORT if headless else [*(a for a in SHORT if a != "--headless"), "--autostart"]
    common = [*LOCUST, "-f", locustfile, "-H", url, *mode]
    master = processes(
        [
            *common,
            "--master",
            "--master-bind-host",
            "127.0.0.1",
            "--master-bind-port",
            port,
            "--expect-workers",
            str(workers),
            "--results-dir",
            str(out),
            "--csv",
            str(out / "locust"),
            *args,
        ],
        tmp_path / "master.log",
    )

    def worker(name: str) -> subprocess.Popen:
        return processes([*common, "--worker", "--master-port", port], tmp_path / f"{name}.log")

    return out, master, [worker(f"worker{i}") for i in range(workers)], worker


def counters(url: str) -> dict[str, float]:
    """The server's request and token counters (success by finish reason)."""
    metrics = scrape(url)
    return {
        key: value
        for key, value in metrics.items()
        if key.startswith(
            (
                "vllm:request_success_total{",
                "vllm:prompt_tokens_total{",
                "vllm:generation_tokens_total{",
                "vllm:time_to_first_token_seconds_count{",
            )
        )
    }


def delta(before: dict, after: dict) -> dict[str, float]:
    return {key: value - before.get(key, 0.0) for key, value in after.items() if value != before.get(key, 0.0)}


def run_user(run_locust, server: Server, out, locustfile: str, *args: str) -> list[dict]:
    """Two users of ``locustfile`` for 2 s against ``server`` (in-flight requests finish: --stop-timeout); returns the
    rows of requests.csv."""
    proc = run_locust(
        "-f",
        f"locustfiles/{locustfile}.py",
        "-H",
        server.url,
        "-u",
        "2",
        "-r",
        "2",
        "-t",
        "2s",
        "--stop-timeout",
        "30",
        "--results-dir",
        str(out),
        *args,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    return read_rows(out / "requests.csv")


def logged_run(run_locust, simulator, tmp_path: Path, *args: str) -> tuple[list[dict], dict[str, dict]]:
    """Two users for 4 s (``args``: the locustfile and its options) against a cpu-tiny simulator with a request log:
    (the rows, the log by request id), checked to be one another's."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--request-log", str(log))
    out = tmp_path / "run"
    proc = run_locust(
        *("-H", sim.url, "-u", "2", "-r", "2", "-t", "4s", "--headless", "--only-summary"),
        *("--results-dir", str(out), *NO_CANARIES, *args),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    sim.stop()  # flushes the log
    rows = read_rows(out / "requests.csv")
    records = read_request_log(str(log))
    # the rows are the server's requests, no more, no less (a request the run's stop cut may not have been logged)
    assert {r["request_id"] for r in rows if r["error"] != "Aborted"} <= set(records) <= {r["request_id"] for r in rows}
    return rows, records


def recorded_sessions(sessions: list[RecordedSession]) -> dict[str, RecordedSession]:
    """Every session and subagent by its path (``trace/agent/...``, as a row's session id without its pass)."""
    paths: dict[str, RecordedSession] = {}

    def add(path: str, session: RecordedSession) -> None:
        paths[path] = session
        for agent in subagents(session):
            add(f"{path}/{agent.session_id}", agent)

    for session in sessions:
        add(session.session_id, session)
    return paths
