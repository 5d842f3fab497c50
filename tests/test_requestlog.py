"""The simulator's per-request timing record (--request-log), joined with the client's rows by X-Request-Id."""

from __future__ import annotations

import json

from benchmarks.harness import read_rows, two_workers
from tests.helpers import NO_CANARIES
from vllm_stress.client.stream import KERNEL_CLOCK, KERNEL_ENABLED, USER_CLOCK
from vllm_stress.core.kernelclock import KERNEL_PLATFORM
from vllm_stress.simulator.api.requestlog import read_request_log

WRITE_DELAY_S = 0.5  # the most a loaded machine is allowed to hold the server's stamped write


def test_every_request_is_logged_under_the_id_the_client_sent(run_locust, simulator, tmp_path):
    """Two workers: the ids differ across processes, and run.json says which clock each one timed chunks with."""
    log = tmp_path / "requests.jsonl"
    sim = simulator("--profile", "cpu-tiny", "--set", "t_fixed=0.005", "--request-log", str(log))
    proc = run_locust(
        "-f",
        "locustfiles/chat.py",
        "-H",
        sim.url,
        "--headless",
        *NO_CANARIES,
        "-u",
        "4",
        "-r",
        "4",
        "-t",
        "4s",
        "--input-tokens",
        "16",
        "--output-tokens",
        "6",
        "--results-dir",
        str(tmp_path / "run"),
        "--only-summary",
        *two_workers(),
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    sim.stop()  # flushes the log
    records = read_request_log(str(log))
    rows = [row for row in read_rows(tmp_path / "run" / "requests.csv") if row["ok"] == "1"]
    assert len(rows) >= 4
    assert len({row["request_id"] for row in rows}) == len(rows)
    for row in rows:
        record = records[row["request_id"]]
        # one write per engine step, fewer when the driver falls behind and hands several steps' tokens over at once
        assert 1 <= record["chunks"] <= int(row["chunks"]) == 6
        assert record["arrival"] <= record["first"] <= record["last"] <= record["end"]
        # the server's arrival is its kernel's receive time of the request: after the client's send time (the
        # kernel's time the request left), by the loopback delivery
        assert record["arrival_clock"] == ("kernel" if KERNEL_PLATFORM else "user")
        if KERNEL_PLATFORM:
            assert float(row["start_time"]) - 5e-6 < record["arrival"] < float(row["start_time"]) + 0.05
        # the server's TTFT is part of the client's, which also holds the loopback delivery both ways: with kernel
        # times at both ends that is some µs, as fine as the CSV's rounding (1 µs per column)
        assert record["first"] - record["arrival"] < float(row["ttft_s"]) + 5e-6
        # with kernel receive times the client's first token comes after the server stamped its write (same host
        # clock): some µs after on a quiet machine, but a loaded one may run the server's write itself late (by 0.1 s
        # under a load average of 6 on 2 cores)
        if KERNEL_ENABLED:
            assert record["first"] < float(row["start_time"]) + float(row["ttft_s"]) < record["first"] + WRITE_DELAY_S
    clocks = json.loads((tmp_path / "run" / "run.json").read_text())["receive_clock"]
    assert set(clocks) == {row["worker"] for row in rows} and len(clocks) == 2
    assert set(clocks.values()) == {KERNEL_CLOCK if KERNEL_ENABLED else USER_CLOCK}
