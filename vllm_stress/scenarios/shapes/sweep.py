"""A working-set sweep's run (``--shape working-set:C1,C2,...``, vllm_stress.core.workingset): the last of --levels'
users throughout, one level of the ramp's kind (levels.csv) whose hold spans the sweep, and in it the sweep's own
levels, each a number of shared contexts the prompts come back to: a --warmup, then a --step-time hold whose window
goes to run.json's ``working_set`` (docs/concepts/kv-tiers.md, "Working-set sweep")."""

from __future__ import annotations

import argparse
import logging
import math
import time

from locust.env import Environment
from locust.runners import Runner

from vllm_stress.core.workingset import WORKING_SET, sweep_contexts
from vllm_stress.master import hooks
from vllm_stress.master.levelwindow import LevelWindow
from vllm_stress.scenarios.shapes.levels import parse_levels, step_seconds

log = logging.getLogger(__name__)


def check_sweep(options: argparse.Namespace) -> list[int] | None:
    """The sweep's contexts (None for another shape); a one-line ValueError for a sweep the options cannot run."""
    contexts = sweep_contexts(getattr(options, "shape", ""))
    if contexts is None:
        return None
    if getattr(options, "prefix_tokens", 0) < 1:
        raise ValueError(f"--shape {WORKING_SET}: needs --prefix-tokens, each context's shared tokens")
    if getattr(options, "prefix_hit_rate", None) is not None:
        raise ValueError(f"--shape {WORKING_SET}: shares --prefix-tokens whole, not --prefix-hit-rate")
    if step_seconds(options.step_time) is None:
        raise ValueError(f"--shape {WORKING_SET}: needs --step-time in seconds, not auto")
    return contexts


class WorkingSetRun:
    """The sweep on the clock of its first tick: ``tick`` returns Locust's (users, spawn rate), None at the end."""

    def __init__(self, contexts: list[int]) -> None:
        self.contexts = contexts
        self.window: LevelWindow | None = None
        self.announced = ""
        self.restart()

    def restart(self) -> None:
        """From the first level at the next tick (Locust ticks a shape once before the test starts, then resets it)."""
        self.started: float | None = None
        self.index = -1
        self.hold_start: float | None = None  # unix seconds: the open level's hold began
        self.current: tuple[int, float] | None = None

    def tick(self, runner: Runner, options: argparse.Namespace) -> tuple[int, float] | None:
        now = time.monotonic()
        environment = runner.environment
        if self.started is None:
            self.begin(runner, options, now)
        assert self.started is not None
        hold_s = step_seconds(options.step_time) or 0.0
        into = now - self.started - options.ramp_time  # the first level's warm-up starts once its ramp is over
        index = max(0, math.floor(into / (options.warmup + hold_s))) if options.warmup + hold_s > 0 else 0
        if index != self.index:
            self.close(environment, options)
            if index >= len(self.contexts):
                self.finish(environment)
                return None
            self.open(environment, index, options)
        if self.hold_start is None and into - index * (options.warmup + hold_s) >= options.warmup:
            self.hold(environment, index, options)
        return self.current

    def begin(self, runner: Runner, options: argparse.Namespace, now: float) -> None:
        """The sweep's users are asked for over --ramp-time: the one level of levels.csv opens."""
        users = parse_levels(options.levels)[-1]
        self.started = now
        self.current = (users, max(users / max(options.ramp_time, 0.001), 1.0))
        self.window = self.window or LevelWindow(runner)
        self.window.start(users)
        hooks.level_started.fire(environment=runner.environment, users=users)

    def open(self, environment: Environment, index: int, options: argparse.Namespace) -> None:
        """The level ``index`` begins: the prompts draw from its contexts, and it warms up."""
        self.index, self.hold_start = index, None
        contexts = self.contexts[index]
        hooks.working_set_changed.fire(
            environment=environment, contexts=contexts, tokens=contexts * options.prefix_tokens
        )
        self.announce(environment, index, options, f"warming up {options.warmup:g} s", options.warmup)

    def hold(self, environment: Environment, index: int, options: argparse.Namespace) -> None:
        """The level's hold begins; the first one also begins the hold of levels.csv's level."""
        self.hold_start = time.time()
        if index == 0 and self.window:
            self.window.hold()
            hooks.level_held.fire(environment=environment, hold_start=self.hold_start)
        self.announce(environment, index, options, f"holding {options.step_time} s", step_seconds(options.step_time))

    def close(self, environment: Environment, options: argparse.Namespace) -> None:
        """The open level ends: a level held gives its window."""
        if self.index < 0 or self.hold_start is None:
            return
        contexts = self.contexts[self.index]
        hooks.working_set_held.fire(
            environment=environment,
            contexts=contexts,
            tokens=contexts * options.prefix_tokens,
            start=self.hold_start,
            end=time.time(),
        )

    def finish(self, environment: Environment) -> None:
        """The sweep is over: levels.csv's level is judged over its hold, and the prompts draw as they would."""
        self.index = len(self.contexts)
        if self.window and self.window.hold_start is not None and self.current:
            self.window.end(environment, self.current[0])
        hooks.working_set_changed.fire(environment=environment, contexts=None, tokens=None)

    def announce(
        self, environment: Environment, index: int, options: argparse.Namespace, phase: str, limit_s: float | None
    ) -> None:
        """One console line per phase of a level (the first level's, ticked again after the reset, once)."""
        contexts = self.contexts[index]
        text = (
            f"Working set {index + 1}/{len(self.contexts)} ({contexts} contexts, "
            f"{contexts * options.prefix_tokens:,} tokens): {phase}"
        )
        if text == self.announced:
            return
        self.announced = text
        phase_name = hooks.PHASES[2] if phase.startswith("holding") else hooks.PHASES[1]
        hooks.phase_changed.fire(environment=environment, text=text, limit_s=limit_s, phase=phase_name)
        log.info("%s", text)
