"""Locustfile: the step ramp, each level of ``--levels`` ramped, warmed up and held (a fixed time or until steady)
(docs/concepts/scenarios.md, section 3). Add it after a user locustfile:
``locust -f locustfiles/chat.py,scenarios/shape.py --levels 10,50 --step-time auto``."""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from typing import Any

from locust import LoadTestShape, events
from locust.argument_parser import LocustArgumentParser
from locust.env import Environment

from vllm_stress.client import features
from vllm_stress.core import stopon
from vllm_stress.core.slo import STOP_ON, StopRule, request_slos, stop_rules
from vllm_stress.master import fdlimits, hooks
from vllm_stress.master.levelwindow import LevelWindow
from vllm_stress.scenarios.shapes.levels import (
    CHECK_INTERVAL_S,
    RAMP_DEFAULTS,
    RAMP_TIMES,
    RUN_KEYS,
    LevelPace,
    LevelRule,
    check_times,
    expected_level_s,
    parse_levels,
    ramp_eta,
    step_seconds,
)
from vllm_stress.scenarios.shapes.stretches import GRAMMAR, STEPS, parse_shape
from vllm_stress.scenarios.shapes.sweep import WorkingSetRun, check_sweep
from vllm_stress.scenarios.shapes.timed import TimedRun, shape_stretches

NOT_IN_A_RUN = "the step ramp runs in a Locust run started from its command line (locust -f ...)"
log = logging.getLogger(__name__)

REACH_TIMEOUT_S = 120.0  # a level that is not reached by then (a worker lost, a server refusing) is held anyway
STOP_WAIT_S = 30.0  # how long a --stop-on verdict waits, after the cooldown, for every process to report the hold
PAIRS = (("warmup", "hold"), ("hold", "cooldown"))  # a level's warm-up and hold: from their start to the next's
PHASE_NAMES = dict(zip(("ramp", "warmup", "hold", "cooldown"), hooks.PHASES, strict=True))  # as the suite's events say


@events.init_command_line_parser.add_listener
def add_options(parser: LocustArgumentParser, **_kw: Any) -> None:
    """The ramp's options, in the load profile's group (vllm_stress.client.features)."""
    group = features.option_group(parser, "profile")
    group.add_argument("--levels", default=RAMP_DEFAULTS["levels"], help="User counts of the ramp's steps")
    group.add_argument(
        "--shape",
        default=STEPS,
        help=f"The load's shape over time: {GRAMMAR} (seconds, users; a soak's HOURS in hours, its USERS by default "
        "the last of --levels; a working-set sweep's C: shared contexts of --prefix-tokens each, at the last of --levels' "
        "users: docs/concepts/kv-tiers.md)",
    )
    group.add_argument(
        "--step-time",
        default=RAMP_DEFAULTS["step-time"],
        help="Seconds each level is held and measured, or 'auto': until it is steady",
    )
    group.add_argument(
        "--max-step-time",
        type=float,
        default=float(RAMP_DEFAULTS["max-step-time"]),
        help="With --step-time auto: the longest hold (and warm-up) of a level, seconds",
    )
    group.add_argument(
        "--warmup",
        type=float,
        default=float(RAMP_DEFAULTS["warmup"]),
        help="Least seconds at each level before its hold (it also waits for one request lifetime)",
    )
    group.add_argument(
        "--cooldown",
        type=float,
        default=float(RAMP_DEFAULTS["cooldown"]),
        help="Seconds with no users after each level",
    )
    group.add_argument(
        "--ramp-time",
        type=float,
        default=float(RAMP_DEFAULTS["ramp-time"]),
        help="Seconds over which a level's new users start",
    )
    group.add_argument(
        "--max-minutes",
        type=float,
        default=0.0,
        help="Time budget of the ramp, minutes (0: none): a level that no longer fits (by the levels done) is cut, "
        "with the reason on the console, and a hold still running at the end of the budget ends there",
    )
    group.add_argument("--scenario", default="", help="Scenario name, kept in run.json (it labels the report)")
    group.add_argument("--slo", default="", help=RUN_KEYS["slo"] + "; the web UI's report reads it too")
    group.add_argument(
        "--run-label",
        default="",
        form=features.COMMAND_LINE,
        help="Text before every progress line: `vllm-stress run --repeats N` sets 'Run K of N', "
        "`vllm-stress search` the probe",
    )
    # read by `vllm-stress run` from the scenario's config file; declared so Locust accepts those keys
    group.add_argument("--repeats", type=int, default=1, form=features.COMMAND_LINE, help=RUN_KEYS["repeats"])
    for key, text in RUN_KEYS.items():
        if key not in ("repeats", "slo"):
            group.add_argument(f"--{key}", default="", form=features.COMMAND_LINE, help=text)
    group.add_argument(
        "--simulator",
        default="",
        form=features.COMMAND_LINE,
        help="Arguments of the embedded simulator when the scenario runs without --target",
    )


def level_bound_s(options: argparse.Namespace, hold_s: float | None) -> float:
    """The longest a level takes once its users are running: its ramp, warm-up and hold at their bounds, cooldown."""
    warmup = max(options.warmup, options.max_step_time)  # the warm-up also waits for one request lifetime
    return (
        min(options.ramp_time, REACH_TIMEOUT_S)
        + warmup
        + (options.max_step_time if hold_s is None else hold_s)
        + options.cooldown
    )


@dataclass(frozen=True)
class Moment:
    """What a tick knows of the level being run: the options, the level, how the console names it, its hold, the
    ramp's ETA and the time in the current phase."""

    environment: Environment
    options: argparse.Namespace
    window: LevelWindow
    target: int  # the level's users
    previous: int  # the users the ramp starts from
    last: bool  # the ramp's last level
    name: str
    hold_s: float | None  # None: hold until steady
    eta: str
    now: float
    elapsed: float


class StepRampShape(LoadTestShape):
    """Ramp, warm up and hold each level of ``--levels`` in turn; stop after the last one."""

    def __init__(self) -> None:
        super().__init__()
        self.window: LevelWindow | None = None  # made at the first tick: Locust sets self.runner after __init__
        self.announced: tuple[str, str] | None = None  # the (level, phase) logged last
        self.paces: list[LevelPace] = []  # the levels done, for the ETA
        self.judged: tuple[int, float] | None = None  # the level's users and e2e p50, once its hold is judged
        self.phase_starts: dict[str, float] = {}  # each phase's start (monotonic) in this level
        self.level_started = time.time()
        self.timed: TimedRun | None = None  # --shape other than steps: its stretches' run
        self.sweep: WorkingSetRun | None = None  # --shape working-set: its levels' run
        self.start_level(0)

    def reset_time(self) -> None:
        super().reset_time()
        if self.timed:
            self.timed.restart()
        if self.sweep:
            self.sweep.restart()
        self.start_level(0)

    def start_level(self, index: int) -> None:
        now = time.time()
        if index == 0:
            self.paces = []
            self.ramp_started = now
        elif self.judged:
            users, lifetime_s = self.judged
            warmup_s, hold_s = (self.phase_starts[b] - self.phase_starts[a] for a, b in PAIRS)
            self.paces.append(LevelPace(users, now - self.level_started, warmup_s, hold_s, lifetime_s))
        self.index = index
        self.level_started = now
        self.judged = None
        self.held: tuple[float, float] | None = None  # the hold's window once it is over, as levels.csv has it
        self.current: tuple[int, float] | None = None  # the (users, spawn rate) asked for; Locust acts on a change
        self.phase = "ramp"
        self.phase_start = self.last_check = time.monotonic()
        self.phase_starts = {self.phase: self.phase_start}

    def tick(self) -> tuple[int, float] | None:
        environment, options = self.locust()
        try:  # checked at every tick: the first comes before test_start, and the web UI may change the options
            levels = self.check_options(options)
        except ValueError as e:
            log.error("%s", e)
            environment.process_exit_code = 2
            return None
        if self.index >= len(levels):
            return None
        if contexts := check_sweep(options):
            self.sweep = self.sweep or WorkingSetRun(contexts)
            return self.sweep.tick(self.runner, options) if self.runner else None
        if str(getattr(options, "shape", STEPS)).strip() != STEPS:
            return self.timed_tick(environment, options)
        moment = self.moment(environment, options, levels)
        cut = self.cut(moment, levels)
        if cut:
            log.warning("%s", cut)
            self.index = len(levels)
            return None
        if self.phase == "ramp" and (refused := fdlimits.refusal(self.runner, moment.target)):
            log.error("%s", refused)
            environment.process_exit_code = 2
            self.index = len(levels)
            return None
        if self.phase == "ramp":
            self.ramp(moment)
        elif self.phase == "warmup":
            self.warm_up(moment)
        elif self.phase == "hold":
            self.hold(moment)
        elif self.phase == "cooldown":
            return self.cool_down(moment)
        return self.current

    def timed_tick(self, environment: Environment, options: argparse.Namespace) -> tuple[int, float] | None:
        """A spike, diurnal or trace shape (vllm_stress.scenarios.shapes.timed): --levels unused."""
        if self.timed is None:
            try:
                self.timed = TimedRun(shape_stretches(options) or [])
            except (ValueError, OSError) as e:
                log.error("%s", e)
                environment.process_exit_code = 2
                self.timed = TimedRun([])
        return self.timed.tick(self.runner, options) if self.runner else None

    def locust(self) -> tuple[Environment, argparse.Namespace]:
        """Locust's environment and parsed options: a shape ticks in a run started from Locust's command line."""
        environment = self.runner.environment if self.runner else None
        if environment is None or environment.parsed_options is None:
            raise RuntimeError(NOT_IN_A_RUN)
        return environment, environment.parsed_options

    def moment(self, environment: Environment, options: argparse.Namespace, levels: list[int]) -> Moment:
        if self.runner is None:
            raise RuntimeError(NOT_IN_A_RUN)
        self.window = self.window or LevelWindow(self.runner)
        now = time.monotonic()
        target = levels[self.index]
        name = f"Level {self.index + 1}/{len(levels)} ({target} users)"
        hold_s = step_seconds(options.step_time)
        return Moment(
            environment,
            options,
            self.window,
            target,
            previous=levels[self.index - 1] if self.index and not options.cooldown else 0,
            last=self.index == len(levels) - 1,
            name=f"{options.run_label} · {name}" if options.run_label else name,
            hold_s=hold_s,
            eta=ramp_eta(
                time.time(),
                levels[self.index :],
                self.paces,
                self.level_started,
                level_bound_s(options, hold_s),
                LevelRule(options.warmup, hold_s),
                self.deadline(options),
            ),
            now=now,
            elapsed=now - self.phase_start,
        )

    def ramp(self, moment: Moment) -> None:
        """Ask for the level's users at once; warm up once they all run (or REACH_TIMEOUT_S has passed)."""
        options, target, elapsed = moment.options, moment.target, moment.elapsed
        if self.current is None:
            self.current = (target, max(abs(target - moment.previous) / max(options.ramp_time, 0.001), 1.0))
            moment.window.start(target)
            hooks.level_started.fire(environment=moment.environment, users=target)
            self.announce(moment.name, f"ramping up over {options.ramp_time:g} s", eta=moment.eta)
        elif self.get_current_user_count() >= target or elapsed > REACH_TIMEOUT_S:
            if elapsed > REACH_TIMEOUT_S:
                log.warning(
                    "Level %d users not reached in %.0f s (%d running): holding anyway",
                    target,
                    REACH_TIMEOUT_S,
                    self.get_current_user_count(),
                )
            self.begin("warmup", moment.now)
            self.announce(
                moment.name,
                f"warming up: at least {options.warmup:g} s and {target} completed requests (one request lifetime)",
                limit_s=options.max_step_time,
                eta=moment.eta,
            )

    def warm_up(self, moment: Moment) -> None:
        """Hold once --warmup has passed and one request lifetime is over (at most --max-step-time)."""
        options = moment.options
        lifetime_done = moment.window.completions() >= moment.target or moment.elapsed >= options.max_step_time
        if moment.elapsed < options.warmup or not lifetime_done:
            return
        moment.window.hold()
        hooks.level_held.fire(environment=moment.environment, hold_start=moment.window.hold_start)
        self.begin("hold", moment.now)
        self.announce(
            moment.name,
            f"holding {moment.hold_s:g} s"
            if moment.hold_s is not None
            else f"holding until steady (judged every {CHECK_INTERVAL_S:g} s, at most {options.max_step_time:g} s)",
            limit_s=options.max_step_time if moment.hold_s is None else moment.hold_s,
            eta=moment.eta,
        )

    def hold(self, moment: Moment) -> None:
        """At the hold's end: the level's verdict, told to the suite and the console; then the cooldown."""
        if not self.hold_over(moment):
            return
        hold_end = moment.window.known_until() if moment.hold_s is None else time.time()
        self.held = (moment.window.hold_start or hold_end, hold_end)
        verdict = moment.window.end(moment.environment, moment.target, hold_end)
        self.judged = moment.target, verdict.e2e_p50_s
        self.begin("cooldown", moment.now)
        steadiness = "steady" if verdict.steady else "not steady"
        budget = ", the end of --max-minutes" if self.used_up(moment.options) else ""
        self.announce(moment.name, f"held {moment.elapsed:.0f} s{budget}: {steadiness} ({verdict.reason})")

    def cool_down(self, moment: Moment) -> tuple[int, float] | None:
        """No users for --cooldown seconds, then the --stop-on verdict on the level held, then the next level."""
        if moment.elapsed >= moment.options.cooldown:
            reason = self.stop_reason(moment)
            if reason is None:  # the hold's requests are still on their way to this process
                return (0, max(moment.target, 1)) if moment.options.cooldown else self.current
            if reason:
                self.stop_early(moment, reason)
                return None
            self.start_level(self.index + 1)
            return self.tick()
        if moment.options.cooldown:
            return 0, max(moment.target, 1)
        return self.current

    def stop_reason(self, moment: Moment) -> str | None:
        """The reason a --stop-on rule gives to end the ramp after the level held (vllm_stress.core.stopon), "" to go
        on (no rule trips, no rule is set, or no level is left to spare), None while the requests of its hold are not
        all known here yet (at most STOP_WAIT_S after the cooldown). The level's hold is the window levels.csv says."""
        rules = stop_rules_of(moment.options)
        if not rules or moment.last or self.held is None:
            return ""
        start, end = self.held
        if moment.window.known_until() < end and moment.elapsed < moment.options.cooldown + STOP_WAIT_S:
            return None
        level = moment.window.measures(rules, start, end)
        return stopon.judge(rules, level, moment.window.scrapes, start, end)

    def stop_early(self, moment: Moment, reason: str) -> None:
        """End the ramp after the level held: one line, and run.json's ``stopped`` (hooks.ramp_stopped)."""
        log.warning("Stopped early after %d users: %s", moment.target, reason)
        hooks.ramp_stopped.fire(environment=moment.environment, users=moment.target, reason=reason)
        self.index = len(parse_levels(moment.options.levels))

    def begin(self, phase: str, now: float) -> None:
        self.phase, self.phase_start = phase, now
        self.phase_starts[phase] = now

    def hold_over(self, moment: Moment) -> bool:
        """A fixed hold is over after its seconds; an auto hold once it is steady or after --max-step-time."""
        if self.used_up(moment.options):
            return True
        if moment.hold_s is not None:
            return moment.elapsed >= moment.hold_s
        if moment.elapsed >= moment.options.max_step_time:
            return True
        if time.monotonic() - self.last_check < CHECK_INTERVAL_S:
            return False
        self.last_check = time.monotonic()
        return moment.window.verdict().steady

    def deadline(self, options: argparse.Namespace) -> float | None:
        """When --max-minutes runs out (unix time), or None without one."""
        return self.ramp_started + options.max_minutes * 60 if options.max_minutes > 0 else None

    def used_up(self, options: argparse.Namespace) -> bool:
        deadline = self.deadline(options)
        return deadline is not None and time.time() >= deadline

    def cut(self, moment: Moment, levels: list[int]) -> str:
        """Why the levels left are cut (--max-minutes), or "": at a level's start when the levels done say it would
        end after the budget, in its ramp or warm-up when the budget is used up (a hold is judged at its end)."""
        options = moment.options
        if options.max_minutes <= 0 or self.phase not in ("ramp", "warmup"):
            return ""
        used_s = time.time() - self.ramp_started
        left = levels[self.index :]
        text = f"level{'s' if len(left) > 1 else ''} {', '.join(map(str, left))} cut: "
        text += f"{used_s / 60:.1f} of {options.max_minutes:g} min used"
        if self.used_up(options):
            return text
        if self.phase == "ramp" and self.current is None and self.paces:
            rule = LevelRule(options.warmup, moment.hold_s)
            need_s = min(expected_level_s(moment.target, self.paces, rule), level_bound_s(options, moment.hold_s))
            if used_s + need_s > options.max_minutes * 60:
                return f"{text}; level {moment.target} would take about {need_s / 60:.1f} more"
        return ""

    @staticmethod
    def check_options(options: argparse.Namespace) -> list[int]:
        """The ramp's levels, or a one-line ValueError for a bad ramp option or --slo (the web UI's form is
        checked with it before a run starts: vllm_stress/webui/formcheck.py)."""
        check_times({flag: getattr(options, flag.replace("-", "_")) for flag in RAMP_TIMES})
        parse_shape(getattr(options, "shape", STEPS))
        check_sweep(options)
        if slo := getattr(options, "slo", ""):
            from vllm_stress.analysis.measures import LATENCY_METRICS  # here: the locustfile's import needs no pandas

            request_slos(slo, LATENCY_METRICS)
        if stop_rules_of(options) and str(getattr(options, "shape", STEPS)).strip() != STEPS:
            raise ValueError(f"{STOP_ON}: only the step ramp (--shape {STEPS}) stops early")
        return parse_levels(options.levels)

    def announce(self, name: str, phase: str, limit_s: float | None = None, eta: str = "") -> None:
        """One console line per phase change, with the ramp's ETA (``eta``); the web UI's LLM tab and dashboard show
        the same text with the time in the phase and its bound (``limit_s``). (Locust ticks a shape once before the
        test starts and again after it resets the shape's clock: the same first line is logged once.)"""
        if (name, phase) == self.announced:
            return
        self.announced = (name, phase)
        text = f"{name}: {phase}" + (f"; {eta}" if eta else "")
        hooks.phase_changed.fire(
            environment=self.locust()[0], text=text, limit_s=limit_s, phase=PHASE_NAMES[self.phase]
        )
        log.info("%s", text)


def stop_rules_of(options: argparse.Namespace) -> list[StopRule]:
    """--stop-on's rules ([] without it): the latency metrics and percentiles the report has, errors, saturated
    (vllm_stress.core.slo); a one-line ValueError for a bad one."""
    if not (text := getattr(options, "stop_on", "")):
        return []
    from vllm_stress.analysis.measures import LATENCY_METRICS, PERCENTILES  # here: the locustfile needs no pandas

    return stop_rules(text, LATENCY_METRICS, PERCENTILES)
