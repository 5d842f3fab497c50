"""Client timing error: each request's TTFT and mean ITL as the client measured them, minus the simulator's own.

    .venv/bin/python benchmarks/timing_error.py [--users 1000] [--seconds 30] [--output-tokens 50]

One simulator (``--request-log``, engine steps of at least 50 ms, no jitter: every step emits one chunk to every
stream at once, as vLLM does) and Locust's chat user on a master with two forked workers, all sharing the machine
(no pinning). Each request carries an ``X-Request-Id``; the simulator logs when it arrived, when the bytes of its
first and last output token were handed to the socket, and how many writes carried output
(``simulator/requestlog.py``). For every successful request:

* TTFT error = client ``ttft_s`` - (server ``first`` - ``arrival``): connecting, sending the request, the kernel's
  delivery and the client's own delay in reading and timestamping the chunk;
* ITL error = client mean gap ((``e2e_s`` - ``ttft_s``) / (chunks - 1)) - server ((``last`` - ``first``) / (writes - 1)).

Prints the p50 / p99 of both and of their absolute values, and the load average before and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from simulator.process import start_simulator  # noqa: E402
from simulator.requestlog import read_request_log  # noqa: E402
from tests.conftest import read_rows, two_workers  # noqa: E402


def quantile(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=1000, method="inclusive")[round(q * 1000) - 1]


def errors(rows: list[dict], records: dict[str, dict]) -> tuple[list[float], list[float]]:
    """(TTFT errors, mean-ITL errors) in seconds of the successful requests the server logged."""
    ttft, itl = [], []
    for row in rows:
        record = records.get(row["request_id"])
        if row["ok"] != "1" or not row["ttft_s"] or record is None or record["first"] is None:
            continue
        ttft.append(float(row["ttft_s"]) - (record["first"] - record["arrival"]))
        chunks = int(row["chunks"])
        if chunks > 1 and record["chunks"] > 1:
            client_itl = (float(row["e2e_s"]) - float(row["ttft_s"])) / (chunks - 1)
            itl.append(client_itl - (record["last"] - record["first"]) / (record["chunks"] - 1))
    return ttft, itl


def describe(name: str, values: list[float]) -> str:
    absolute = [abs(v) for v in values]
    return (f"{name} error over {len(values):,} requests: p50 {quantile(values, 0.5) * 1e3:.2f} ms, "
            f"p99 {quantile(values, 0.99) * 1e3:.2f} ms; |error| p50 {quantile(absolute, 0.5) * 1e3:.2f} ms, "
            f"p99 {quantile(absolute, 0.99) * 1e3:.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=1000)
    parser.add_argument("--seconds", type=int, default=30)
    parser.add_argument("--output-tokens", type=int, default=50)
    parser.add_argument("--step", type=float, default=0.05, help="simulated engine step floor, s (%(default)s)")
    args = parser.parse_args()
    print("load before:", os.getloadavg())
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "server.jsonl"
        sim_args = ["--profile", "cpu-tiny", "--max-num-seqs", "2048", "--max-model-len", "4096",
                    "--set", f"t_fixed={args.step}", "--set", "jitter=0", "--request-log", str(log)]
        with start_simulator(*sim_args) as sim:
            cmd = [sys.executable, "-m", "locust", "-f", "locustfiles/chat.py", "-H", sim.url, "--headless",
                   "-u", str(args.users), "-r", str(max(args.users // 5, 1)), "-t", f"{args.seconds}s",
                   "--input-tokens", "32", "--output-tokens", str(args.output_tokens), "--results-dir",
                   str(Path(tmp) / "run"), "--only-summary", "-L", "WARNING", *two_workers()]
            subprocess.run(cmd, cwd=REPO, check=True, timeout=args.seconds + 180)
        print("load after:", os.getloadavg())
        ttft, itl = errors(read_rows(Path(tmp) / "run" / "requests.csv"), read_request_log(str(log)))
    print(f"{args.users} streams, master + 2 workers, {args.output_tokens} tokens per request")
    print(describe("TTFT", ttft))
    print(describe("mean ITL", itl))


if __name__ == "__main__":
    main()
