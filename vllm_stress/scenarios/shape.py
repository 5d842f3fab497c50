"""Locustfile: the step ramp. Add it after a user locustfile:

    locust -f locustfiles/chat.py,scenarios/shape.py --levels 10,50,100 --step-time auto --headless ...

Each level goes through three phases, each logged once when it begins:

* **ramping**: the level's users are started over ``--ramp-time`` seconds; it ends when the master counts them all
  running;
* **warming up**: unmeasured, at least ``--warmup`` seconds and until as many of the level's requests have completed
  as it has users — one request lifetime, measured (by Little's law a closed loop of U users completes U requests in
  one mean e2e): the first wave of the new users' requests is over;
* **holding**: the level's window in ``levels.csv``. ``--step-time N`` holds N seconds; ``--step-time auto`` holds
  until the window is steady (``vllm_stress.core.steady``, judged every few seconds from the rows the master has), at most
  ``--max-step-time`` seconds (which bounds the warm-up too). Either way the level's verdict is logged at its end.

With ``--cooldown`` the users are stopped for that long after a level, so the next one starts from an idle server.
A shape runs only on the master (or the local runner). It tells the rest of the suite through the suite's own events
(``vllm_stress/master/hooks.py``: level started / held / ended, phase changed) and judges its holds on a ``LevelWindow``
that those events' listeners never see.
"""

import logging
import time

from locust import LoadTestShape, events

from vllm_stress.master import hooks
from vllm_stress.master.levelwindow import LevelWindow
from vllm_stress.scenarios.levels import RAMP_DEFAULTS, RAMP_TIMES, check_times, parse_levels, ramp_eta, step_seconds

log = logging.getLogger(__name__)

REACH_TIMEOUT_S = 120.0  # a level that is not reached by then (a worker lost, a server refusing) is held anyway
CHECK_INTERVAL_S = 5.0  # how often an auto hold is judged


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    parser.add_argument("--levels", default=RAMP_DEFAULTS["levels"], help="User counts of the ramp's steps")
    parser.add_argument(
        "--step-time",
        default=RAMP_DEFAULTS["step-time"],
        help="Seconds each level is held and measured, or 'auto': until it is steady",
    )
    parser.add_argument(
        "--max-step-time",
        type=float,
        default=float(RAMP_DEFAULTS["max-step-time"]),
        help="With --step-time auto: the longest hold (and warm-up) of a level, seconds",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=float(RAMP_DEFAULTS["warmup"]),
        help="Least seconds at each level before its hold (it also waits for one request lifetime)",
    )
    parser.add_argument(
        "--cooldown",
        type=float,
        default=float(RAMP_DEFAULTS["cooldown"]),
        help="Seconds with no users after each level",
    )
    parser.add_argument(
        "--ramp-time",
        type=float,
        default=float(RAMP_DEFAULTS["ramp-time"]),
        help="Seconds over which a level's new users start",
    )
    parser.add_argument("--scenario", default="", help="Scenario name, kept in run.json (it labels the report)")
    # read by `python -m scenarios run` from the scenario's config file; declared so Locust accepts those keys
    parser.add_argument("--repeats", type=int, default=1, include_in_web_ui=False, help="Runs of the scenario")
    parser.add_argument(
        "--run-label",
        default="",
        include_in_web_ui=False,
        help="Text before every progress line: `python -m scenarios run --repeats N` sets 'Run K of N', "
        "`python -m scenarios search` the probe",
    )
    parser.add_argument(
        "--simulator",
        default="",
        include_in_web_ui=False,
        help="Arguments of the embedded simulator when the scenario runs without --target",
    )


def level_bound_s(options, hold_s: float | None) -> float:
    """The longest a level takes once its users are running: its ramp, warm-up and hold at their bounds, cooldown."""
    warmup = max(options.warmup, options.max_step_time)  # the warm-up also waits for one request lifetime
    return (
        min(options.ramp_time, REACH_TIMEOUT_S)
        + warmup
        + (options.max_step_time if hold_s is None else hold_s)
        + options.cooldown
    )


class StepRampShape(LoadTestShape):
    """Ramp, warm up and hold each level of ``--levels`` in turn; stop after the last one."""

    def __init__(self) -> None:
        super().__init__()
        self.window: LevelWindow | None = None  # made at the first tick: Locust sets self.runner after __init__
        self.announced: tuple[str, str] | None = None  # the (level, phase) logged last
        self.start_level(0)

    def reset_time(self) -> None:
        super().reset_time()
        self.start_level(0)

    def start_level(self, index: int) -> None:
        self.index = index
        self.level_started = time.time()
        if index == 0:
            self.ramp_started = self.level_started
        self.current = None  # the (users, spawn rate) asked for; Locust acts when it changes
        self.phase = "ramp"
        self.phase_start = self.last_check = time.monotonic()

    def tick(self):
        options = self.runner.environment.parsed_options
        try:  # checked at every tick: the first comes before test_start, and the web UI may change the options
            levels = self.check_options(options)
        except ValueError as e:
            log.error("%s", e)
            self.runner.environment.process_exit_code = 2
            return None
        if self.index >= len(levels):
            return None
        environment = self.runner.environment
        window = self.window = self.window or LevelWindow(self.runner)
        now = time.monotonic()
        elapsed = now - self.phase_start
        target = levels[self.index]
        name = f"Level {self.index + 1}/{len(levels)} ({target} users)"
        if options.run_label:
            name = f"{options.run_label} · {name}"
        hold_s = step_seconds(options.step_time)
        eta = self.eta(len(levels), level_bound_s(options, hold_s))
        if self.phase == "ramp":
            if self.current is None:
                previous = levels[self.index - 1] if self.index and not options.cooldown else 0
                self.current = (target, max(abs(target - previous) / max(options.ramp_time, 0.001), 1.0))
                window.start(target)
                hooks.level_started.fire(environment=environment, users=target)
                self.announce(name, f"ramping up over {options.ramp_time:g} s", eta=eta)
            elif self.get_current_user_count() >= target or elapsed > REACH_TIMEOUT_S:
                if elapsed > REACH_TIMEOUT_S:
                    log.warning(
                        "Level %d users not reached in %.0f s (%d running): holding anyway",
                        target,
                        REACH_TIMEOUT_S,
                        self.get_current_user_count(),
                    )
                self.begin("warmup", now)
                self.announce(
                    name,
                    f"warming up: at least {options.warmup:g} s and {target} completed requests (one request lifetime)",
                    limit_s=options.max_step_time,
                    eta=eta,
                )
        elif self.phase == "warmup":
            lifetime_done = window.completions() >= target or elapsed >= options.max_step_time
            if elapsed >= options.warmup and lifetime_done:
                window.hold()
                hooks.level_held.fire(environment=environment)
                self.begin("hold", now)
                self.announce(
                    name,
                    f"holding {hold_s:g} s"
                    if hold_s is not None
                    else f"holding until steady (judged every {CHECK_INTERVAL_S:g} s, at most "
                    f"{options.max_step_time:g} s)",
                    limit_s=options.max_step_time if hold_s is None else hold_s,
                    eta=eta,
                )
        elif self.phase == "hold" and self.hold_over(hold_s, elapsed, options.max_step_time):
            verdict = window.verdict()
            hooks.level_ended.fire(
                environment=environment,
                users=target,
                verdict=verdict,
                output_tokens_per_s=window.output_tokens_per_s(),
                schedule_lag_p99_s=window.schedule_lag_p99_s(),
            )
            self.begin("cooldown", now)
            self.announce(
                name,
                f"held {elapsed:.0f} s: " + ("steady" if verdict.steady else "not steady") + f" ({verdict.reason})",
            )
        elif self.phase == "cooldown":
            if elapsed >= options.cooldown:
                self.start_level(self.index + 1)
                return self.tick()
            if options.cooldown:
                return 0, max(target, 1)
        return self.current

    def begin(self, phase: str, now: float) -> None:
        self.phase, self.phase_start = phase, now

    def hold_over(self, hold_s: float | None, elapsed: float, max_step_time: float) -> bool:
        """A fixed hold is over after its seconds; an auto hold once it is steady or after max_step_time."""
        if hold_s is not None:
            return elapsed >= hold_s
        if elapsed >= max_step_time:
            return True
        if time.monotonic() - self.last_check < CHECK_INTERVAL_S:
            return False
        self.last_check = time.monotonic()
        return self.window.verdict().steady

    @staticmethod
    def check_options(options) -> list[int]:
        """The ramp's levels, or a one-line ValueError for a bad ramp option (the web UI's form is
        checked with it before a run starts: vllm_stress/webui/formcheck.py)."""
        check_times({flag: getattr(options, flag.replace("-", "_")) for flag in RAMP_TIMES})
        return parse_levels(options.levels)

    def eta(self, levels: int, level_s: float) -> str:
        return ramp_eta(time.time(), self.index, levels, self.ramp_started, self.level_started, level_s)

    def announce(self, name: str, phase: str, limit_s: float | None = None, eta: str = "") -> None:
        """One console line per phase change, with the ramp's ETA (``eta``); the web UI's LLM tab and dashboard show
        the same text with the time in the phase and its bound (``limit_s``). (Locust ticks a shape once before the
        test starts and again after it resets the shape's clock: the same first line is logged once.)"""
        if (name, phase) == self.announced:
            return
        self.announced = (name, phase)
        text = f"{name}: {phase}" + (f"; {eta}" if eta else "")
        hooks.phase_changed.fire(environment=self.runner.environment, text=text, limit_s=limit_s)
        log.info("%s", text)
