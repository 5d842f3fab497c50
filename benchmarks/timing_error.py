"""Client timing error: each request's TTFT and mean ITL as the client measured them, minus the simulator's own.

    .venv/bin/python -m benchmarks.timing_error [--users 1000] [--seconds 30] [--output-tokens 50]

One simulator (``--request-log``, engine steps of at least 50 ms, no jitter: every step emits one chunk to every
stream at once, as vLLM does) and Locust's chat user on a master with two forked workers, all sharing the machine
(no pinning). Each request carries an ``X-Request-Id``; the simulator logs when it arrived, when the bytes of its
first and last output token were handed to the socket, and how many writes carried output
(``vllm_stress/simulator/api/requestlog.py``). For every successful request:

* TTFT error = client ``ttft_s`` - (server ``first`` - ``arrival``): connecting, sending the request, the kernel's
  delivery and the client's own delay in reading and timestamping the chunk. The simulator's ``arrival`` is its
  kernel's receive time of the request (``arrival_clock`` "kernel", asyncio loop on Linux): the time a request then
  waits in the server's socket while its event loop writes other streams is the server's, as it is in the
  client's TTFT;
* send error = server ``arrival`` - the client's send time (``start_time``): the client's path from its send
  timestamp to the request's bytes reaching the server's kernel (same host clock);
* first-token receive error = the client's first-token time as unix time (``start_time`` + ``ttft_s``) - server
  ``first``: the same host's clock on both sides, so this is the delivery plus the client's lag in stamping it, without
  the send side (the server's ``arrival`` is taken in user space, after its own event loop got round to the request);
* ITL error = client mean gap ((``e2e_s`` - ``ttft_s``) / (chunks - 1)) - server ((``last`` - ``first``) / (writes - 1)).

Requests that started in the first ``--skip`` seconds (the ramp, when every user also opens its connection) are left
out. Prints the p50 / p99 of both and of their absolute values, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.harness import read_rows, two_workers
from vllm_stress.core.metrics import percentile
from vllm_stress.simulator.api.requestlog import read_request_log
from vllm_stress.simulator.process import start_simulator

REPO = Path(__file__).resolve().parent.parent


def errors(rows: list[dict], records: dict[str, dict], skip: float) -> tuple[list[float], ...]:
    """(TTFT errors, send errors, first-token receive errors, mean-ITL errors) in seconds of the successful requests the server logged that started ``skip``
    seconds or more after the first one."""
    ttft, send, receive, itl = [], [], [], []
    origin = min(float(row["start_time"]) for row in rows)
    for row in rows:
        record = records.get(row["request_id"])
        if float(row["start_time"]) < origin + skip:
            continue
        if row["ok"] != "1" or not row["ttft_s"] or record is None or record["first"] is None:
            continue
        ttft.append(float(row["ttft_s"]) - (record["first"] - record["arrival"]))
        send.append(record["arrival"] - float(row["start_time"]))
        receive.append(float(row["start_time"]) + float(row["ttft_s"]) - record["first"])
        chunks = int(row["chunks"])
        if chunks > 1 and record["chunks"] > 1:
            client_itl = (float(row["e2e_s"]) - float(row["ttft_s"])) / (chunks - 1)
            itl.append(client_itl - (record["last"] - record["first"]) / (record["chunks"] - 1))
    return ttft, send, receive, itl


def describe(name: str, values: list[float]) -> str:
    absolute = [abs(v) for v in values]
    return (
        f"{name} error over {len(values):,} requests: p50 {percentile(np.array(values), 50) * 1e3:.2f} ms, "
        f"p99 {percentile(np.array(values), 99) * 1e3:.2f} ms; |error| p50 {percentile(np.array(absolute), 50) * 1e3:.2f} ms, "
        f"p99 {percentile(np.array(absolute), 99) * 1e3:.2f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--output-tokens", type=int, default=50)
    parser.add_argument(
        "--skip",
        type=float,
        default=10.0,
        help="leave out requests started in the first SKIP s: ramp-up and new connections (%(default)s)",
    )
    parser.add_argument("--step", type=float, default=0.05, help="simulated engine step floor, s (%(default)s)")
    args = parser.parse_args()
    print("load before:", os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.jsonl"
        sim_args = [
            "--profile",
            "cpu-tiny",
            "--max-num-seqs",
            "2048",
            "--max-model-len",
            "4096",
            "--set",
            f"t_fixed={args.step}",
            "--set",
            "jitter=0",
            "--request-log",
            str(log),
        ]
        with start_simulator(*sim_args) as sim:
            cmd = [
                sys.executable,
                "-m",
                "locust",
                "-f",
                "locustfiles/chat.py",
                "-H",
                sim.url,
                "--headless",
                "-u",
                str(args.users),
                "-r",
                str(max(args.users // 5, 1)),
                "-t",
                f"{args.seconds}s",
                "--input-tokens",
                "32",
                "--output-tokens",
                str(args.output_tokens),
                "--results-dir",
                str(Path(tmp) / "run"),
                "--only-summary",
                "-L",
                "WARNING",
                *two_workers(),
            ]
            subprocess.run(cmd, cwd=REPO, check=True, timeout=args.seconds + 180)
        print("load after:", os.getloadavg())
        records = read_request_log(str(log))
        ttft, send, receive, itl = errors(read_rows(Path(tmp) / "run" / "requests.csv"), records, args.skip)
    clocks = sorted({record.get("arrival_clock", "user") for record in records.values()})
    print(
        f"{args.users} streams, master + 2 workers, {args.output_tokens} tokens per request; server arrival clock:",
        ", ".join(clocks),
    )
    print(describe("TTFT", ttft))
    print(describe("send", send))
    print(describe("first-token receive", receive))
    print(describe("mean ITL", itl))


if __name__ == "__main__":
    main()
