"""How many streamed tokens per second one simulator process serves to 1,000 concurrent SSE streams.

The simulator runs pinned to CPU core 0 (one process, one event loop), the client in a separate process pinned to
core 1: ``--streams`` closed-loop keep-alive streams of ``/v1/completions`` (short prompt, ``--max-tokens`` tokens each,
``ignore_eos``), each sending its next request as soon as the previous one ends. Tokens are counted from the SSE
bytes (one ``"text":`` per chunk, one token per chunk) inside a measuring window after a warm-up. The simulated GPU
is made fast (``--time-scale``) so the figure is the HTTP front end's, and the server's CPU use over the window is
reported to show which side was the limit, with its CPU per token. ``tokens_per_read`` is how many tokens each of the
client's reads carried: 1 when every token went out in its own write, more when the simulated GPU outran the front
end and the driver handed several steps' tokens over at once (``vllm_stress/simulator/api/driver.py``); with ``--time-scale 1`` the
GPU model sets the pace and the front end writes token by token.

    .venv/bin/python -m benchmarks.simulator_streams --streams 1000 --seconds 20 [--time-scale 1]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from vllm_stress.simulator.process import start_simulator

MARKER = b'"text":"'
DONE = b"[DONE]"


def pin(pid: int, core: int) -> bool:
    try:
        os.sched_setaffinity(pid, {core})
    except (OSError, ValueError):
        return False
    return True


def generated_tokens(url: str) -> float:
    """The server's own count, ``vllm:generation_tokens_total``, to cross-check the client's."""
    with urllib.request.urlopen(f"{url}/metrics", timeout=30) as response:
        text = response.read().decode()
    return sum(
        float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith("vllm:generation_tokens_total{")
    )


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class StreamConnection(asyncio.Protocol):
    """One keep-alive connection sending the same streamed request again as soon as ``[DONE]`` arrives.

    Raw asyncio protocol rather than an HTTP client library: the client must be much cheaper per token than the
    server for the figure to be the server's. Markers are counted over the last 7 bytes of the previous read plus
    the new one, so one split across reads is counted once (each server write holds whole SSE events, so
    chunked-encoding framing never falls inside one). ``counts`` = [tokens, reads].
    """

    def __init__(self, request: bytes, counts: list[int], stop_at: float, closed: asyncio.Future) -> None:
        self.request = request
        self.counts = counts
        self.stop_at = stop_at
        self.closed = closed
        self.carry = b""
        self.transport = None

    def connection_made(self, transport) -> None:
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        window = self.carry + data
        self.counts[0] += window.count(MARKER)
        self.counts[1] += 1
        if DONE in window:
            self.carry = b""
            if time.monotonic() < self.stop_at:
                self.transport.write(self.request)
            else:
                self.transport.close()
        else:
            self.carry = data[-7:]

    def connection_lost(self, exc) -> None:
        if not self.closed.done():
            self.closed.set_result(exc)


def streamed_request(host: str, port: int, max_tokens: int) -> bytes:
    body = json.dumps({"prompt": "Hello there", "max_tokens": max_tokens, "ignore_eos": True, "stream": True})
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    )
    return (head + body).encode()


async def client(url: str, streams: int, max_tokens: int, warmup: float, seconds: float) -> dict:
    host, port = url.removeprefix("http://").split(":")
    loop = asyncio.get_running_loop()
    request = streamed_request(host, int(port), max_tokens)
    counts = [0, 0]
    stop_at = time.monotonic() + warmup + seconds
    closed = [loop.create_future() for _ in range(streams)]
    for future in closed:
        await loop.create_connection(lambda f=future: StreamConnection(request, counts, stop_at, f), host, int(port))
    await asyncio.sleep(warmup)
    (first, first_reads), window_start, cpu_start = counts, time.monotonic(), time.process_time()
    await asyncio.sleep(seconds)
    tokens, reads, window = counts[0] - first, counts[1] - first_reads, time.monotonic() - window_start
    client_cpu = (time.process_time() - cpu_start) / window
    await asyncio.wait_for(asyncio.gather(*closed), timeout=60)
    return {
        "tokens": tokens,
        "window_s": window,
        "tokens_per_s": tokens / window,
        "client_cpu_share": client_cpu,
        "tokens_per_read": tokens / max(reads, 1),
    }


def run_client(args: argparse.Namespace) -> None:
    pin(0, args.client_core)
    import uvloop

    result = uvloop.run(client(args.url, args.streams, args.max_tokens, args.warmup, args.seconds))
    print(json.dumps(result), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=200, help="tokens per request (%(default)s)")
    parser.add_argument("--seconds", type=float, default=20.0, help="measuring window (%(default)s)")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before the window (%(default)s)")
    parser.add_argument("--time-scale", default="1000", help="simulator --time-scale (%(default)s)")
    parser.add_argument("--event-loop", default="asyncio", help="simulator --event-loop (%(default)s)")
    parser.add_argument("--server-core", type=int, default=0)
    parser.add_argument("--client-core", type=int, default=1)
    parser.add_argument("--client", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.client:
        run_client(args)
        return
    server_args = (
        "--profile",
        "cpu-tiny",
        "--max-num-seqs",
        "1024",
        "--time-scale",
        args.time_scale,
        "--event-loop",
        args.event_loop,
    )
    with start_simulator(*server_args) as sim:
        pinned = pin(sim.proc.pid, args.server_core)
        command = [
            sys.executable,
            __file__,
            "--client",
            "--url",
            sim.url,
            "--streams",
            str(args.streams),
            "--max-tokens",
            str(args.max_tokens),
            "--seconds",
            str(args.seconds),
            "--warmup",
            str(args.warmup),
            "--client-core",
            str(args.client_core),
        ]
        client_proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        time.sleep(args.warmup)
        cpu_before, tokens_before, started = cpu_seconds(sim.proc.pid), generated_tokens(sim.url), time.monotonic()
        time.sleep(args.seconds)
        cpu_after, tokens_after = cpu_seconds(sim.proc.pid), generated_tokens(sim.url)
        elapsed = time.monotonic() - started
        output, _ = client_proc.communicate(timeout=args.warmup + args.seconds + 120)
    result = json.loads(output.strip().splitlines()[-1])
    result["server_cpu_share"] = (cpu_after - cpu_before) / elapsed
    result["server_generated_tokens_per_s"] = (tokens_after - tokens_before) / elapsed
    result["server_cpu_us_per_token"] = 1e6 * result["server_cpu_share"] / result["server_generated_tokens_per_s"]
    result["server_pinned"] = pinned
    result["streams"] = args.streams
    result["event_loop"] = args.event_loop
    result["time_scale"] = args.time_scale
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
