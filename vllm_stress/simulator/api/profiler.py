"""vLLM's profiler routes, ``POST /start_profile`` and ``POST /stop_profile``: vllm serve registers them only when
it runs with a profiler (vLLM 0.32's ``--profiler-config``, ``VLLM_TORCH_PROFILER_DIR`` before), each answering 200
with an empty body; without one they are not found (404). The simulator's ``--profiler-dir DIR`` registers them: a
profile is what the engine ran between the two, written on stop as a small Chrome trace, ``DIR/profile-N.json``,
with its unix start and stop (what a test checks)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from ..engine.core import Engine


class Profiler:
    """The profile under way (its start, the engine's finished requests then) and the traces written so far."""

    def __init__(self, directory: str, engine: Engine) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.engine = engine
        self.started: float | None = None
        self.written = 0

    def attach(self, app: web.Application) -> None:
        app.router.add_post("/start_profile", self.start)
        app.router.add_post("/stop_profile", self.stop)

    async def start(self, _request: web.Request) -> web.Response:
        self.started = time.time()
        return web.Response(status=200)

    async def stop(self, _request: web.Request) -> web.Response:
        """Ends the profile under way and writes its trace (none when no profile was started)."""
        if self.started is not None:
            stopped = time.time()
            self.written += 1
            trace = {
                "traceEvents": [
                    {
                        "name": "profile",
                        "ph": "X",
                        "ts": round(self.started * 1e6),
                        "dur": round((stopped - self.started) * 1e6),
                        "pid": os.getpid(),
                        "tid": 0,
                        "args": {"running": len(self.engine.running), "waiting": len(self.engine.waiting)},
                    }
                ],
                "started": self.started,
                "stopped": stopped,
            }
            (self.directory / f"profile-{self.written}.json").write_text(json.dumps(trace))
            self.started = None
        return web.Response(status=200)
