"""Start the simulator as a child process and wait until it serves (used by the scenario runner and the tests), and
stop a child process."""

from __future__ import annotations

import collections
import queue
import re
import subprocess
import sys
import threading
import time

from vllm_stress.core import children

READY_LINE = re.compile(
    r"vllm-stress simulator ready: (?P<url>http://\S+) model=(?P<model>\S+) profile=(?P<profile>\S+)"
)
_OUTPUT_LINES_KEPT = 200


class SimulatorStartError(RuntimeError):
    pass


class SimulatorProcess:
    def __init__(self, proc: subprocess.Popen, url: str, model: str, profile: str, output: collections.deque):
        self.proc = proc
        self.url = url
        self.model = model
        self.profile = profile
        self.output = output  # the last lines the process printed (stdout and stderr)

    def stop(self, timeout: float = 10.0) -> int:
        return stop_process(self.proc, timeout)

    def __enter__(self) -> SimulatorProcess:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def stop_process(proc: subprocess.Popen, grace: float) -> int:
    """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit code."""
    if proc.poll() is None:
        proc.terminate()
        try:
            return proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            proc.kill()
    return proc.wait()


def _pump(proc: subprocess.Popen, lines: queue.Queue, kept: collections.deque) -> None:
    """Read the child's output for its whole life (so its pipe never fills), keeping the last lines."""
    for line in proc.stdout or ():  # started with stdout=PIPE: always a pipe
        kept.append(line.rstrip("\n"))
        lines.put(line)
    lines.put(None)


def start_simulator(*args: str, timeout: float = 30.0) -> SimulatorProcess:
    command = [sys.executable, "-m", "vllm_stress.simulator", "--port", "0", *args]
    # its own session: a Ctrl-C meant for the caller must not kill the server before the caller's clients are done;
    # it ends with the caller, even a killed one
    proc = children.popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue = queue.Queue()
    kept: collections.deque = collections.deque(maxlen=_OUTPUT_LINES_KEPT)
    threading.Thread(target=_pump, args=(proc, lines, kept), daemon=True, name="simulator-output").start()
    deadline = time.monotonic() + timeout
    try:
        while True:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            if line is None:
                break
            match = READY_LINE.search(line)
            if match:
                return SimulatorProcess(proc, match["url"], match["model"], match["profile"], kept)
    except queue.Empty:
        problem = f"no ready line within {timeout:g} s"
    else:
        problem = f"exited with code {proc.wait()}"
    SimulatorProcess(proc, "", "", "", kept).stop()
    output = "\n".join(kept)
    raise SimulatorStartError(f"simulator {' '.join(args)} {problem}; output:\n{output}")
