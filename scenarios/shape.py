"""Locustfile: the step ramp. Add it after a user locustfile:

    locust -f locustfiles/chat.py,scenarios/shape.py --levels 10,50,100 --step-time 60 --headless ...

Each level asks for its user count, waits until every user is really running (as the master counts them), holds
for ``--warmup`` seconds unmeasured, then for ``--step-time`` seconds: that hold is the level's steady-state
window in ``levels.csv``. With ``--cooldown`` the users are stopped for that long after a level, so the next one
starts from an idle server. A shape runs only on the master (or the local runner).
"""

import logging
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for `scenarios.*`

from locust import LoadTestShape, events  # noqa: E402

from scenarios.levels import RAMP_TIMES, check_times, parse_levels  # noqa: E402

log = logging.getLogger(__name__)

REACH_TIMEOUT_S = 120.0  # a level that is not reached by then (a worker lost, a server refusing) is held anyway


@events.init_command_line_parser.add_listener
def _add_options(parser, **_kw) -> None:
    parser.add_argument("--levels", default="10,50,100,200,500,750,1000", help="User counts of the ramp's steps")
    parser.add_argument("--step-time", type=float, default=60.0, help="Seconds each level is held and measured")
    parser.add_argument("--warmup", type=float, default=5.0, help="Seconds at each level before its hold starts")
    parser.add_argument("--cooldown", type=float, default=0.0, help="Seconds with no users after each level")
    parser.add_argument("--ramp-time", type=float, default=5.0, help="Seconds over which a level's new users start")
    parser.add_argument("--scenario", default="", include_in_web_ui=False, help="Scenario name, kept in run.json")
    # read by `python -m scenarios run` from the scenario's config file; declared so Locust accepts those keys
    parser.add_argument("--repeats", type=int, default=1, include_in_web_ui=False, help="Runs of the scenario")
    parser.add_argument("--simulator", default="", include_in_web_ui=False,
                        help="Arguments of the embedded simulator when the scenario runs without --target")


class StepRampShape(LoadTestShape):
    """Hold each level of ``--levels`` once it is reached; stop after the last one."""

    def __init__(self) -> None:
        super().__init__()
        self.start_level(0)

    def reset_time(self) -> None:
        super().reset_time()
        self.start_level(0)

    def start_level(self, index: int) -> None:
        self.index = index
        self.current = None  # the (users, spawn rate) asked for; Locust acts when it changes
        self.phase = "ramp"
        self.phase_start = time.monotonic()

    def tick(self):
        options = self.runner.environment.parsed_options
        try:  # checked at every tick: the first comes before test_start, and the web UI may change the options
            levels = parse_levels(options.levels)
            check_times({flag: getattr(options, flag.replace("-", "_")) for flag in RAMP_TIMES})
        except ValueError as e:
            log.error("%s", e)
            self.runner.environment.process_exit_code = 2
            return None
        recorder = self.runner.environment.llm_target.recorder
        now = time.monotonic()
        elapsed = now - self.phase_start
        if self.index >= len(levels):
            return None
        target = levels[self.index]
        if self.phase == "ramp":
            if self.current is None:
                previous = levels[self.index - 1] if self.index and not options.cooldown else 0
                self.current = (target, max(abs(target - previous) / max(options.ramp_time, 0.001), 1.0))
                recorder.level_started(target)
                log.info("Level %d/%d: %d users", self.index + 1, len(levels), target)
            elif self.get_current_user_count() >= target or elapsed > REACH_TIMEOUT_S:
                if elapsed > REACH_TIMEOUT_S:
                    log.warning("Level %d users not reached in %.0f s (%d running): holding anyway",
                                target, REACH_TIMEOUT_S, self.get_current_user_count())
                self.phase, self.phase_start = "warmup", now
        elif self.phase == "warmup" and elapsed >= options.warmup:
            recorder.level_held()
            self.phase, self.phase_start = "hold", now
        elif self.phase == "hold" and elapsed >= options.step_time:
            recorder.level_ended()
            self.phase, self.phase_start = "cooldown", now
        elif self.phase == "cooldown":
            if elapsed >= options.cooldown:
                self.start_level(self.index + 1)
                return self.tick()
            if options.cooldown:
                return 0, max(target, 1)
        return self.current
