"""``vllm-stress worker``: the Locust workers of one worker host for every run of a ``vllm-stress run`` started with
``--master-bind-host``. Each worker process takes its locustfiles and options from the master (Locust's ``-f -``) and
quits when its master does, at the end of each repeat; this command starts it again for the next master, and ends
when no master has listened for ``--master-wait`` seconds, or on SIGTERM, SIGHUP or Ctrl-C (stopping its processes,
which also end if this command is killed)."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from vllm_stress.core import children
from vllm_stress.scenarios.run.stopping import stop_on_signals
from vllm_stress.simulator.process import stop_process

log = logging.getLogger("worker")

MASTER_PORT = 5557  # Locust's default --master-port / --master-bind-port
MASTER_WAIT_S = 900.0  # a run's next repeat (or matrix cell, whose server may take minutes to start) comes sooner
BROKEN_S = 10.0  # a worker process that fails this soon after its start cannot work here: the command stops
POLL_S = 1.0
PROBE_S = 5.0  # how often a master is looked for while every worker process runs
STOP_GRACE_S = 10.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--master-host", required=True, help="Address of the master (run's --master-bind-host)")
    parser.add_argument(
        "--master-port", type=int, default=MASTER_PORT, help="Port of the master (default: %(default)s)"
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="Locust worker processes on this host; the master's --expect-workers counts them over every host "
        "(`vllm-stress plan` says how many a load needs) (default: %(default)s)",
    )
    parser.add_argument(
        "--master-wait",
        type=float,
        default=MASTER_WAIT_S,
        metavar="S",
        help="End after S seconds with no master listening (default: %(default).0f)",
    )


@dataclass
class Slot:
    """One worker process, started again each time it ends after its master quit."""

    command: list[str]
    env: dict[str, str]
    proc: subprocess.Popen | None = None
    started: float = field(default=0.0)

    def start(self) -> None:
        self.proc = children.popen(self.command, env=self.env)
        self.started = time.monotonic()

    def ended(self) -> int | None:
        """Its exit code once it ended (None while it runs or before its first start)."""
        return None if self.proc is None else self.proc.poll()

    def stop(self) -> None:
        if self.proc is not None:
            stop_process(self.proc, STOP_GRACE_S)


def worker_command(master_host: str, master_port: int) -> list[str]:
    """A Locust worker that downloads its locustfiles from the master (and gets its options with each spawn)."""
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        "-",
        "--worker",
        "--master-host",
        master_host,
        "--master-port",
        str(master_port),
    ]


def listening(host: str, port: int) -> bool:
    """Something accepts TCP connections at ``host:port`` (a master is bound there)."""
    try:
        with socket.create_connection((host, port), timeout=2):
            return True
    except OSError:
        return False


def serve(master_host: str, master_port: int, processes: int, master_wait_s: float) -> int:
    """Keep ``processes`` workers attached to whichever master listens at the address; the exit code."""
    command = worker_command(master_host, master_port)
    with tempfile.TemporaryDirectory(prefix="vllm-stress-worker-") as tmp:
        slots = []
        for index in range(processes):  # each its own folder for the locustfiles it downloads
            folder = os.path.join(tmp, str(index))
            os.mkdir(folder)
            slots.append(Slot(command, os.environ | {"TMPDIR": folder}))
        try:
            return supervise(slots, master_host, master_port, master_wait_s)
        finally:
            for slot in slots:
                slot.stop()


def supervise(slots: list[Slot], master_host: str, master_port: int, master_wait_s: float) -> int:
    """Start each slot again when it ended (its master quit) and a master listens; the exit code when no master
    listened for ``master_wait_s`` (0) or a process failed at its start (its code)."""
    last_seen, probed = time.monotonic(), -PROBE_S
    log.info("%d worker process(es) for the master at %s:%d", len(slots), master_host, master_port)
    while True:
        idle = [slot for slot in slots if slot.proc is None or slot.ended() is not None]
        for slot in idle:
            code = slot.ended()
            if code and time.monotonic() - slot.started < BROKEN_S:
                log.error("a worker process failed at its start (exit code %d): stopping", code)
                return code
        now = time.monotonic()
        if idle or now - probed >= PROBE_S:
            probed = now
            if listening(master_host, master_port):
                last_seen = now
                for slot in idle:
                    slot.start()
        if now - last_seen > master_wait_s:
            log.info("no master at %s:%d for %.0f s: done", master_host, master_port, master_wait_s)
            return 0
        time.sleep(POLL_S)


def build_parser(prog: str = "vllm-stress worker") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Keep this host's Locust workers attached to the master of `vllm-stress run --master-bind-host "
        "ADDR --expect-workers N` for every repeat; end when no master has listened for --master-wait seconds.",
    )
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None, prog: str = "vllm-stress worker") -> int:
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(name)s: %(message)s")
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    if args.processes < 1 or args.master_wait <= 0:
        parser.error("--processes and --master-wait must be positive")
    stop_on_signals()
    try:
        return serve(args.master_host, args.master_port, args.processes, args.master_wait)
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM, SIGHUP: the worker processes are stopped
        return 0
