"""Hosts on one machine: Linux network namespaces on a bridge, each with its own address and hostname.

``Network`` makes a hub namespace holding a bridge; ``add_host(name)`` makes a namespace with one veth end on that
bridge and the other end (``eth0``) addressed 10.213.X.N/24, X from the test process's id so that parallel runs never
share names (all names carry the pid). Nothing is added to the root namespace: the hosts reach each other, and
nothing else. ``Host.start(cmd)`` runs a command inside a host (``ip netns exec``) under its own hostname
(``unshare --uts``), so Locust's worker ids (``hostname_uuid``) tell the hosts apart. ``Host.cut()`` and
``Host.mend()`` take the host's link on the bridge down and up again: a cable pulled, packets dropped silently.

Needs root and a kernel that allows network namespaces; ``netns_unavailable()`` says why not (tests skip with it).
"""

from __future__ import annotations

import collections
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time

from tests.helpers import REPO

PREFIX = f"vs{os.getpid()}"  # namespaces vs<pid>-<host>, veths v<pid><index>{h,p}
SUBNET = f"10.213.{os.getpid() % 250}"


def ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def netns_unavailable() -> str:
    """Why namespaced hosts cannot be made here ('' when they can)."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = f"{PREFIX}-probe"
    try:
        ip("netns", "add", probe)
        ip("netns", "del", probe)
    except (OSError, subprocess.CalledProcessError) as e:
        return f"`ip netns add` is not permitted here: {getattr(e, 'stderr', '') or e}"
    return ""


class Process:
    """A process started in a host; its output is kept (and can be waited for) line by line."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self.popen = popen
        self.lines: collections.deque[str] = collections.deque(maxlen=5000)
        self.changed = threading.Condition()
        self.ended = False  # its output is closed
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.popen.stdout:
            with self.changed:
                self.lines.append(line.rstrip("\n"))
                self.changed.notify_all()
        with self.changed:
            self.ended = True
            self.changed.notify_all()

    @property
    def output(self) -> str:
        return "\n".join(self.lines)

    def wait_for(self, pattern: str, timeout: float) -> re.Match:
        """The first output line matching ``pattern``; AssertionError with the output when it does not come."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while True:
                for line in self.lines:
                    if match := re.search(pattern, line):
                        return match
                left = deadline - time.monotonic()
                if left <= 0 or self.ended:
                    raise AssertionError(f"no line matching {pattern!r} in {timeout:g} s; output:\n{self.output}")
                self.changed.wait(min(left, 1.0))

    def wait(self, timeout: float) -> int:
        return self.popen.wait(timeout)

    def stop(self) -> None:
        """SIGTERM to its process group (it and the workers it forked), SIGKILL after 10 s."""
        if self.popen.poll() is None:
            os.killpg(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.popen.pid, signal.SIGKILL)
                self.popen.wait()


class Host:
    def __init__(self, network: Network, name: str, index: int) -> None:
        self.network, self.name = network, name
        self.netns = f"{PREFIX}-{name}"
        self.address = f"{SUBNET}.{index}"
        self.bridge_end = f"v{os.getpid()}{index}h"
        self.processes: list[Process] = []

    def command(self, cmd: list[str]) -> list[str]:
        """``cmd`` as run inside this host, under its own hostname."""
        return [
            "ip",
            "netns",
            "exec",
            self.netns,
            "unshare",
            "--uts",
            "sh",
            "-c",
            'hostname "$0" && exec "$@"',
            self.name,
            *cmd,
        ]

    def start(self, cmd: list[str], env: dict | None = None) -> Process:
        """Start ``cmd`` in this host (from the repository root, in its own process group)."""
        environment = os.environ | {"PYTHONUNBUFFERED": "1"} | (env or {})
        popen = subprocess.Popen(
            self.command(cmd),
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=environment,
            start_new_session=True,
        )
        process = Process(popen)
        self.processes.append(process)
        return process

    def python(self, code: str, timeout: float = 30) -> str:
        """Run Python ``code`` in this host; its stdout."""
        done = subprocess.run(
            self.command([sys.executable, "-c", code]),
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=True,
        )
        return done.stdout

    def cut(self) -> None:
        """Take this host's link on the bridge down: its packets are dropped from now on."""
        ip("-n", self.network.hub, "link", "set", self.bridge_end, "down")

    def mend(self) -> None:
        ip("-n", self.network.hub, "link", "set", self.bridge_end, "up")


class Network:
    """A bridge in a hub namespace and hosts attached to it; ``close()`` removes every namespace it made."""

    def __init__(self) -> None:
        self.hub = f"{PREFIX}-hub"
        self.hosts: list[Host] = []
        ip("netns", "add", self.hub)
        ip("-n", self.hub, "link", "add", "br0", "type", "bridge")
        ip("-n", self.hub, "link", "set", "br0", "up")

    def add_host(self, name: str) -> Host:
        host = Host(self, name, len(self.hosts) + 1)
        self.hosts.append(host)
        peer = f"v{os.getpid()}{len(self.hosts)}p"
        ip("netns", "add", host.netns)
        ip("-n", self.hub, "link", "add", host.bridge_end, "type", "veth", "peer", "name", peer, "netns", host.netns)
        ip("-n", self.hub, "link", "set", host.bridge_end, "master", "br0", "up")
        ip("-n", host.netns, "link", "set", peer, "name", "eth0")
        ip("-n", host.netns, "addr", "add", f"{host.address}/24", "dev", "eth0")
        ip("-n", host.netns, "link", "set", "eth0", "up")
        ip("-n", host.netns, "link", "set", "lo", "up")
        return host

    def close(self) -> None:
        """Stop every process the hosts started, then delete the namespaces (their veths go with them)."""
        for host in self.hosts:
            for process in host.processes:
                process.stop()
        for netns in [host.netns for host in self.hosts] + [self.hub]:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True)


def guide_commands(page: str = "docs/guides/distributed.md") -> tuple[list[str], list[str]]:
    """The master's and a worker's command of the distributed-runs guide, as argument lists (after `locust`)."""
    text = (REPO / page).read_text()
    block = text.split("```bash", 1)[1].split("```", 1)[0]
    commands = [
        shlex.split(command.split("#")[0])
        for command in block.replace("\\\n", " ").splitlines()
        if command.strip().startswith("locust ")
    ]
    master, worker = (command[1:] for command in commands)
    return master, worker


def substitute(args: list[str], options: dict[str, str], placeholders: dict[str, str]) -> list[str]:
    """``args`` with the value of each option in ``options`` replaced, and each placeholder argument replaced."""
    result = []
    for arg in args:
        result.append(options[result[-1]] if result and result[-1] in options else placeholders.get(arg, arg))
    return result
