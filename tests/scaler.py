"""A test fixture, not a product: a small autoscaler for simulator replicas behind Debian's nginx, so that a run can
meet a fleet that grows and shrinks. Each replica has a slot (a loopback port fixed up front, so a run can list every
slot's /metrics, answering or not); the live ones are nginx's upstream servers, and a replica joins or leaves by a
rewrite of nginx's config and a SIGHUP (nginx's graceful reload), as an endpoints update reaches a router.

The rule is the Kubernetes HPA's on an average-value metric (deploy/k8s/hpa.yaml scales on the same gauge):
desired = ceil(the live replicas' summed vllm:num_requests_waiting / ``target_waiting``), between 1 and the slots,
looked at every ``poll_s``; a replica asked for starts ``startup_delay_s`` later (a pod's image pull and model load)
and joins nginx once it serves; the fleet shrinks only after ``scale_down_after_s`` of lower counts (the HPA's
stabilization window), the newest replica leaving nginx first and stopped once it has drained. ``events`` keeps
what it did, (unix time, "asked" | "serving" | "left", slot), for tests to check a run's analysis against.

``python -m tests.scaler --slots 3 -- --profile cpu-tiny`` runs one until Ctrl-C, printing the router's URL and
every slot's /metrics URL."""

from __future__ import annotations

import argparse
import math
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import requests

from tests.test_fleet import NGINX, answers, nginx_config
from vllm_stress.master.replicaset import look
from vllm_stress.scenarios.run.runner import free_port
from vllm_stress.simulator.process import SimulatorProcess, start_simulator

DRAIN_TIMEOUT_S = 30.0  # a leaving replica is stopped after this even if it still holds requests


class Scaler:
    """Simulator replicas in ``slots`` loopback ports behind nginx on ``router``; ``start()``, then ``stop()``."""

    def __init__(
        self,
        folder: Path,
        slots: int,
        simulator_args: list[str],
        target_waiting: float = 2.0,
        startup_delay_s: float = 3.0,
        poll_s: float = 0.5,
        scale_down_after_s: float = 30.0,
    ) -> None:
        self.folder = folder
        self.ports = [free_port() for _ in range(slots)]
        self.simulator_args = simulator_args
        self.target_waiting = target_waiting
        self.startup_delay_s = startup_delay_s
        self.poll_s = poll_s
        self.scale_down_after_s = scale_down_after_s
        self.router_port = free_port()
        self.router = f"http://127.0.0.1:{self.router_port}"
        self.replicas: dict[int, SimulatorProcess] = {}  # slot -> its replica, serving behind nginx
        self.pending: set[int] = set()  # slots asked for, not serving yet
        self.draining: set[int] = set()  # slots whose replica left nginx and has not stopped yet
        self.events: list[tuple[float, str, int]] = []
        self.lower_since: float | None = None  # since when the desired count is below the live one
        self.nginx: subprocess.Popen | None = None
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        self.session = requests.Session()

    @property
    def metrics_urls(self) -> list[str]:
        """Every slot's /metrics URL, serving or not."""
        return [f"http://127.0.0.1:{port}/metrics" for port in self.ports]

    def start(self) -> Scaler:
        """One replica serving behind nginx, and the rule looked at every ``poll_s``."""
        self.launch(0)
        self.configure()
        self.nginx = subprocess.Popen(
            [NGINX, "-p", self.folder, "-e", self.folder / "error.log", "-c", self.folder / "nginx.conf"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 20
        while not answers(self.router) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.spawn(self.loop)
        return self

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(timeout=DRAIN_TIMEOUT_S + 10)
        if self.nginx and self.nginx.poll() is None:
            self.nginx.terminate()
            self.nginx.wait(timeout=10)
        for replica in self.replicas.values():  # all told at once: each may take a while to end
            replica.proc.terminate()
        for replica in self.replicas.values():
            replica.stop()

    def spawn(self, target, *args) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True)
        self.threads.append(thread)
        thread.start()

    def launch(self, slot: int) -> None:
        """Start the slot's replica and wait until it serves."""
        self.replicas[slot] = start_simulator(*self.simulator_args, "--port", str(self.ports[slot]), timeout=60)
        self.events.append((time.time(), "serving", slot))

    def configure(self) -> None:
        """nginx's config with the serving replicas as its upstream; a running nginx reloads it (SIGHUP)."""
        hosts = [f"127.0.0.1:{self.ports[slot]}" for slot in sorted(self.replicas)]
        text = nginx_config(self.folder, self.router_port, hosts, [1] * len(hosts))
        (self.folder / "nginx.conf").write_text(text)
        if self.nginx and self.nginx.poll() is None:
            self.nginx.send_signal(signal.SIGHUP)

    def waiting(self) -> float:
        """The serving replicas' vllm:num_requests_waiting, summed."""
        looks = [look(self.session, self.metrics_urls[slot]) for slot in list(self.replicas)]
        return sum(float(waiting) for up, _, waiting in looks if up and waiting != "")

    def desired(self, waiting: float) -> int:
        return min(max(math.ceil(waiting / self.target_waiting), 1), len(self.ports))

    def loop(self) -> None:
        while not self.stopping.wait(self.poll_s):
            desired = self.desired(self.waiting())
            with self.lock:
                live = len(self.replicas) + len(self.pending)
                busy = {*self.replicas, *self.pending, *self.draining}
                free = [slot for slot in range(len(self.ports)) if slot not in busy]
                for slot in free[: max(desired - live, 0)]:
                    self.pending.add(slot)
                    self.events.append((time.time(), "asked", slot))
                    self.spawn(self.join, slot)
                self.lower_since = (self.lower_since or time.monotonic()) if desired < live else None
                shrink = self.lower_since and time.monotonic() - self.lower_since >= self.scale_down_after_s
                if shrink and not self.pending and len(self.replicas) > 1:
                    self.lower_since = None
                    self.leave(max(self.replicas))

    def join(self, slot: int) -> None:
        """A replica asked for: its start-up delay, its start, then nginx's; the thread lives on until the scaler
        stops, as the replica's parent-death signal is tied to it (vllm_stress.core.children)."""
        if self.stopping.wait(self.startup_delay_s):
            return
        self.launch(slot)
        with self.lock:
            self.pending.discard(slot)
            self.configure()
        self.stopping.wait()

    def leave(self, slot: int) -> None:
        """Out of nginx at once; stopped once it has drained (called with the lock held)."""
        replica = self.replicas.pop(slot)
        self.draining.add(slot)
        self.configure()
        self.events.append((time.time(), "left", slot))
        self.spawn(self.drain, slot, replica)

    def drain(self, slot: int, replica: SimulatorProcess) -> None:
        deadline = time.monotonic() + DRAIN_TIMEOUT_S
        while time.monotonic() < deadline and not self.stopping.is_set():
            up, running, waiting = look(self.session, self.metrics_urls[slot])
            if not up or (running == 0 and waiting == 0):
                break
            time.sleep(self.poll_s)
        replica.stop()
        with self.lock:
            self.draining.discard(slot)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slots", type=int, default=3, help="Most replicas")
    parser.add_argument("--target-waiting", type=float, default=2.0, help="Waiting requests per replica wanted")
    parser.add_argument("--startup-delay", type=float, default=3.0, help="Seconds before an asked replica starts")
    parser.add_argument("--scale-down-after", type=float, default=30.0, help="Seconds of lower counts to shrink")
    parser.add_argument("--folder", default="", help="nginx's files (default: a new folder under /tmp)")
    parser.add_argument("simulator_args", nargs="*", help="The replicas' simulator arguments (after --)")
    args = parser.parse_args(argv)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})  # for sigwait, in every thread
    folder = Path(args.folder or f"/tmp/scaler-{os.getpid()}")
    folder.mkdir(parents=True, exist_ok=True)
    scaler = Scaler(
        folder, args.slots, args.simulator_args, args.target_waiting, args.startup_delay, 0.5, args.scale_down_after
    )
    scaler.start()
    print("router", scaler.router, flush=True)
    print(" ".join(f"--server-metrics-url={url}" for url in scaler.metrics_urls), flush=True)
    try:
        signal.sigwait({signal.SIGINT, signal.SIGTERM})
    finally:
        scaler.stop()
        for at, what, slot in scaler.events:
            print(f"{at:.3f} {what} slot {slot}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
