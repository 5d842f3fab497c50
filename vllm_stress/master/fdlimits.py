"""Every load process's file-descriptor limit, raised at its start, and the one-line refusal of a level the
processes cannot open (core/descriptors.py): a worker sends its limit to the master, which judges each level by
the lowest limit among its workers; a local runner judges by its own."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from locust.runners import MasterRunner, Runner, WorkerRunner

from vllm_stress.core import descriptors, fleet

if TYPE_CHECKING:
    from locust.env import Environment

LIMIT_MESSAGE = "vllm_stress_fd_limit"  # worker -> master: its RLIMIT_NOFILE after raising it

LIMITS: list[FdLimits] = []  # the process's, made at Locust's init (one per runner)


class FdLimits:
    """This process's descriptor limit, raised at once; on the master, its workers' as they report them."""

    def __init__(self, environment: Environment) -> None:
        self.own = descriptors.raise_limit()
        self.by_worker: dict[str, int] = {}
        runner = environment.runner
        assert runner is not None  # made at Locust's init
        self.runner = runner
        LIMITS.append(self)
        if isinstance(runner, WorkerRunner):
            runner.send_message(LIMIT_MESSAGE, {"limit": self.own})
        elif isinstance(runner, MasterRunner):
            runner.register_message(LIMIT_MESSAGE, self.on_limit)

    def on_limit(self, msg: Any, **_kw: object) -> None:
        self.by_worker[msg.node_id] = int(msg.data["limit"])

    def refusal(self, level: int) -> str:
        """Why ``level`` users cannot be opened by this run's load processes ("" when they can, or while no worker
        has reported its limit)."""
        runner = self.runner
        replicas = len(fleet.replica_urls(runner.environment.host or "")) or 1  # a connection to each
        if not isinstance(runner, MasterRunner):
            return descriptors.refusal(level, 1, self.own, replicas)
        limits = [self.by_worker[w] for w in list(runner.clients.keys()) if w in self.by_worker]
        if not limits:
            return ""
        return descriptors.refusal(level, max(runner.worker_count, 1), min(limits), replicas)


def refusal(runner: Runner | None, level: int) -> str:
    """The run's refusal of ``level`` (see FdLimits.refusal); "" where the suite's plugin is not loaded."""
    limits = next((limits for limits in LIMITS if limits.runner is runner), None)
    return limits.refusal(level) if limits else ""
