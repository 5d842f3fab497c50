"""A timed shape's run (``--shape spike|diurnal|trace``, vllm_stress.scenarios.shapes.stretches): each stretch asks for its
users at its time; its first --warmup seconds (at most half of it) warm up, the rest is its hold, judged at its end
as a step ramp's level is. A stretch whose users were judged before runs unjudged (levels are named by users)."""

from __future__ import annotations

import argparse
import logging
import time
from itertools import accumulate

from locust.env import Environment
from locust.runners import Runner

from vllm_stress.client.trace import read_trace, select
from vllm_stress.master import hooks
from vllm_stress.master.levelwindow import LevelWindow
from vllm_stress.scenarios.shapes.levels import parse_levels
from vllm_stress.scenarios.shapes.stretches import Stretch, stretches_of

log = logging.getLogger(__name__)


def shape_stretches(options: argparse.Namespace) -> list[Stretch] | None:
    """The stretches of --shape (None: the step ramp), reading --trace for ``trace:WINDOW_S``; a soak without its
    users runs the last of --levels."""
    trace_path = getattr(options, "trace", "") or ""
    needs_trace = str(options.shape).strip().startswith("trace")
    lines = None
    if needs_trace and trace_path:
        lines = select(read_trace(trace_path), options.trace_start, options.trace_duration, options.speedup)
    return stretches_of(options.shape, lines, parse_levels(options.levels)[-1])


class TimedRun:
    """The stretches on the clock of the first tick: ``tick`` returns Locust's (users, spawn rate), None at the end."""

    def __init__(self, stretches: list[Stretch]) -> None:
        self.stretches = stretches
        self.ends = list(accumulate(stretch.seconds for stretch in stretches))
        self.window: LevelWindow | None = None
        self.announced = ""
        self.restart()

    def restart(self) -> None:
        """From the first stretch at the next tick (Locust ticks a shape once before the test starts, then resets it)."""
        self.started: float | None = None
        self.index = -1
        self.stretch_start = 0.0
        self.judged: set[int] = set()  # user counts judged so far
        self.judging = False  # the open stretch is a level
        self.held = False
        self.current: tuple[int, float] | None = None

    def tick(self, runner: Runner, options: argparse.Namespace) -> tuple[int, float] | None:
        now = time.monotonic()
        self.started = now if self.started is None else self.started
        self.window = self.window or LevelWindow(runner)
        environment = runner.environment
        index = next((i for i, end in enumerate(self.ends) if now - self.started < end), len(self.stretches))
        if index != self.index:
            self.close(environment)
            if index >= len(self.stretches):
                return None
            self.open(environment, index, options, now)
        elif self.judging and not self.held and now - self.stretch_start >= self.warmup_s(options):
            self.window.hold()
            hooks.level_held.fire(environment=environment)
            self.held = True
        return self.current

    def warmup_s(self, options: argparse.Namespace) -> float:
        return min(options.warmup, self.stretches[self.index].seconds / 2)

    def open(self, environment: Environment, index: int, options: argparse.Namespace, now: float) -> None:
        """The stretch ``index`` begins: its users asked for over --ramp-time; a level when its users are new."""
        stretch = self.stretches[index]
        previous = self.current[0] if self.current else 0
        self.index, self.stretch_start, self.held = index, now, False
        self.current = (stretch.users, max(abs(stretch.users - previous) / max(options.ramp_time, 0.001), 1.0))
        self.judging = stretch.users not in self.judged
        self.judged.add(stretch.users)
        if self.window and self.judging:
            self.window.start(stretch.users)
        hooks.level_started.fire(environment=environment, users=stretch.users, judged=self.judging)
        state = "a level" if self.judging else "judged before: not a level"
        text = f"Stretch {index + 1}/{len(self.stretches)}: {stretch.users} users for {stretch.seconds:g} s ({state})"
        if text != self.announced:  # the first stretch, ticked again after the reset
            self.announced = text
            hooks.phase_changed.fire(environment=environment, text=text, limit_s=stretch.seconds, phase=hooks.PHASES[0])
            log.info("%s", text)

    def close(self, environment: Environment) -> None:
        """The open stretch ends: a level held is judged over its hold."""
        if not (self.judging and self.held and self.window and self.current):
            return
        self.window.end(environment, self.current[0])
        self.judging = False
