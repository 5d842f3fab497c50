"""Real-time driver: runs the engine in one asyncio task, like vLLM's engine-core busy loop, and hands each step's
tokens to the HTTP streams (docs/concepts/simulator.md, section 7)."""

from __future__ import annotations

import asyncio

from ..engine.core import Engine
from ..engine.sequence import Sequence
from .metrics import EngineMetrics

HOLD_S = 0.02  # when behind: longest run of steps whose tokens are not yet handed to the HTTP handlers
MAX_LAG_S = 0.1  # when behind: most wall-clock seconds the simulated GPU may lag before it waits for the CPU


class EngineDriver:
    def __init__(self, engine: Engine, metrics: EngineMetrics, time_scale: float = 1.0) -> None:
        self.engine = engine
        self.metrics = metrics
        self.time_scale = time_scale
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._origin = 0.0

    def engine_now(self) -> float:
        """The engine clock's time now (engine seconds: wall seconds × time_scale since the driver started)."""
        return (asyncio.get_running_loop().time() - self._origin) * self.time_scale

    def start(self) -> None:
        self._origin = asyncio.get_running_loop().time()
        self._task = asyncio.create_task(self._run(), name="engine-loop")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    def submit(self, seqs: list[Sequence], arrival: float | None = None) -> None:
        """Hand ``seqs`` to the engine, arrived now or at engine time ``arrival`` (a request that waited for its KV)."""
        self.engine.add_request(*seqs, arrival=self.engine_now() if arrival is None else arrival)
        self._wake.set()

    def abort(self, seqs: list[Sequence]) -> None:
        """Free the slots of a request whose client went away. Like vLLM 0.32, no finished-request statistic counts it
        (vLLM's abort path drops the request before them): its request log says it was aborted."""
        for seq in seqs:
            if seq.finish_reason is None:
                self.engine.abort(seq)

    @property
    def load(self) -> int:
        return len(self.engine.running) + len(self.engine.waiting)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        engine = self.engine
        pending: set[Sequence] = set()
        published_at = loop.time()
        while True:
            if not engine.has_work:
                self._publish(pending)
                self._wake.clear()
                await self._wake.wait()
            now = self.engine_now()
            engine.advance_to(now - MAX_LAG_S * self.time_scale if engine.running else now)
            result = engine.step()
            ahead = (engine.clock - self.engine_now()) / self.time_scale
            if ahead > 0:
                await asyncio.sleep(ahead)
            if result.duration:  # not a wait for the API server
                self.metrics.observe_step(result)
            pending.update(result.outputs)
            if ahead > 0 or loop.time() - published_at >= HOLD_S:
                self._publish(pending)
                if ahead <= 0:
                    await asyncio.sleep(1e-4)
                published_at = loop.time()  # after the hand-off's writes: the next run of steps gets HOLD_S of its own

    @staticmethod
    def _publish(pending: set[Sequence]) -> None:
        for seq in pending:
            if seq.sink is not None:
                seq.sink.on_token(seq)
        pending.clear()
