"""A ramp's options: their defaults, parsing and checks (shared by the shape and the runner), and its ETA."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from vllm_stress.core.steady import MIN_LIFETIMES
from vllm_stress.core.workingset import sweep_contexts
from vllm_stress.scenarios.shapes.stretches import STEPS, stretches_of, total_s

AUTO = "auto"  # --step-time auto: hold each level until it is steady (vllm_stress.core.steady), at most --max-step-time
RAMP_DEFAULTS = {  # option -> default, as Locust's config files and command lines spell them
    "levels": "10,50,100,200,500,750,1000",
    "step-time": "60",
    "max-step-time": "600",
    "warmup": "5",
    "cooldown": "0",
    "ramp-time": "5",
}
# The keys of a scenario file (and options of `vllm-stress run`) that `vllm-stress run` reads itself, beside the ramp's
# and the user's options: declared to Locust with the ramp's options so that a config file may set them.
RUN_KEYS = {
    "repeats": "Runs of the scenario",
    "workers": "Locust worker processes on this machine",
    "gpus": "GPUs serving the target, for the report's per-GPU throughput",
    "gpu-hour-price": "$ per GPU-hour (with gpus), for the report's cost per million tokens",
    "slo": "Per-request limits for the report's goodput (the --slo grammar)",
}
RAMP_TIMES = ("step-time", "max-step-time", "warmup", "cooldown", "ramp-time")  # the shape's options in seconds
CHECK_INTERVAL_S = 5.0  # how often an auto hold is judged
FIT_LEVELS = 3  # the ETA's lifetimes follow the line through this many levels done


def parse_levels(text: str) -> list[int]:
    """``"10,50,100"`` -> ``[10, 50, 100]``; a clear ValueError for anything else."""
    try:
        levels = [int(part) for part in str(text).split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--levels must be comma-separated whole numbers, got {text!r}") from None
    if not levels:
        raise ValueError("--levels is empty")
    if any(users < 1 for users in levels):
        raise ValueError(f"--levels must be at least 1 user each, got {text!r}")
    return levels


def step_seconds(value: str | float) -> float | None:
    """--step-time as seconds, or None for ``auto``."""
    return None if str(value).strip() == AUTO else float(value)


def check_times(times: Mapping[str, str | float]) -> None:
    """``{"step-time": 60, ...}``: each must be a number of seconds, at least 0 (--step-time may be ``auto``); a clear
    ValueError otherwise."""
    for flag, value in times.items():
        if flag == "step-time" and str(value).strip() == AUTO:
            continue
        try:
            ok = float(value) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            hint = " or auto" if flag == "step-time" else ""
            raise ValueError(f"--{flag} must be a number of seconds{hint}, at least 0, got {value!r}")


def longest_run_s(keys: dict[str, str]) -> float:
    """An upper bound of one run's length from a config's keys: each level's ramp, warm-up and hold at their
    bounds (with ``auto`` the warm-up and the hold may each last up to --max-step-time) and a margin; a timed
    --shape's length and the margin; a working-set sweep's ramp, its levels' warm-ups and holds, and the margin."""
    shape = keys.get("shape", STEPS).strip()
    value = {key: keys.get(key, default) for key, default in RAMP_DEFAULTS.items()}
    hold = step_seconds(value["step-time"])
    bound = float(value["max-step-time"])
    if contexts := sweep_contexts(shape):  # a sweep refuses an auto hold: its bound is the longest
        per_level = float(value["warmup"]) + (bound if hold is None else hold)
        return float(value["ramp-time"]) + len(contexts) * per_level + 120
    if shape != STEPS and not shape.startswith("trace"):  # a timed shape: its stretches' time
        return total_s(stretches_of(shape) or []) + 120
    per_level = float(value["ramp-time"]) + float(value["cooldown"]) + max(float(value["warmup"]), bound)
    per_level += bound if hold is None else hold
    return len(parse_levels(value["levels"])) * (per_level + 30) + 120


@dataclass(frozen=True)
class LevelPace:
    """A level done: its users, how long it took (from its ramp to the next level's), of which its warm-up and its
    hold, and its requests' lifetime (e2e p50 of its window)."""

    users: int
    seconds: float
    warmup_s: float
    hold_s: float
    lifetime_s: float


@dataclass(frozen=True)
class LevelRule:
    """What the options make a level's warm-up and hold: at least ``warmup_s`` (--warmup) and one request lifetime,
    then ``hold_s`` (--step-time), or with ``hold_s`` None a hold until steady: judged every CHECK_INTERVAL_S, it needs
    MIN_LIFETIMES request lifetimes (vllm_stress.core.steady)."""

    warmup_s: float
    hold_s: float | None

    def hold_for(self, lifetime_s: float) -> float:
        """The hold of a level whose requests live ``lifetime_s``: the fixed one, or the lifetimes the steady rule
        needs plus half a check interval (the first check after them comes 0 to CHECK_INTERVAL_S later)."""
        if self.hold_s is not None:
            return self.hold_s
        return max(CHECK_INTERVAL_S, MIN_LIFETIMES * lifetime_s + CHECK_INTERVAL_S / 2)


def expected_lifetime_s(users: int, done: list[LevelPace]) -> float:
    """A request's lifetime at ``users`` from the levels done, the middle of two bounds (docs/concepts/scenarios.md,
    section 3). By Little's law a closed loop of N users served at X requests/s keeps each request N / X s: at most,
    X grows no further than the best rate so far (N / lifetime); at least, it keeps rising as it did, the lifetime
    following the line through the last three levels (flat after one level), and never shorter than the last one."""
    shortest = done[-1].lifetime_s
    longest = max(users / max(pace.users / pace.lifetime_s for pace in done), shortest)
    recent = done[-FIT_LEVELS:]
    if len({pace.users for pace in recent}) < 2:
        return (shortest + longest) / 2
    slope, intercept = np.polyfit([pace.users for pace in recent], [pace.lifetime_s for pace in recent], 1)
    least = min(max(float(intercept + slope * users), shortest), longest)
    return (least + longest) / 2


def expected_level_s(users: int, done: list[LevelPace], rule: LevelRule) -> float:
    """How long a level of ``users`` takes: its part outside warm-up and hold (ramp, cooldown, ticks) as in the levels
    done, a warm-up of as many lifetimes as theirs took, and the hold ``rule`` gives for the expected lifetime (their
    mean length when no request of theirs ended)."""
    timed = [pace for pace in done if pace.lifetime_s > 0]  # a level with no request ended says nothing of lifetimes
    if not timed:
        return float(np.mean([pace.seconds for pace in done]))
    lifetime_s = expected_lifetime_s(users, timed)
    other_s = float(np.median([pace.seconds - pace.warmup_s - pace.hold_s for pace in timed]))
    warmup_lifetimes = float(np.median([pace.warmup_s / pace.lifetime_s for pace in timed]))
    return max(other_s, 0.0) + max(rule.warmup_s, warmup_lifetimes * lifetime_s) + rule.hold_for(lifetime_s)


def ramp_eta(
    now: float,
    left: list[int],
    done: list[LevelPace],
    level_started: float,
    level_s: float,
    rule: LevelRule,
    deadline: float | None = None,
) -> str:
    """When a ramp ends whose levels ``left`` are still to run, the first since ``level_started``: each as long as
    the levels ``done`` say (``expected_level_s``; from the second level on, this one ending no earlier than
    ``now``), and at the latest, with this level and the rest each at their bound (``level_s``). With a ``deadline``
    (--max-minutes) the ramp ends by it at the latest, and the levels expected to end after it are cut."""
    latest = now + len(left) * level_s
    if deadline is not None:
        latest = min(latest, max(deadline, now))
    text = f"the ramp ends by {clock(latest)} at the latest" + (" (--max-minutes)" if latest == deadline else "")
    if done:
        this, *rest = (min(expected_level_s(n, done, rule), level_s) for n in left)
        expected = max(level_started + this, now)
        for level_s_expected in rest:
            if deadline is not None and expected + level_s_expected > deadline:
                break  # the shape cuts it and those after it
            expected += level_s_expected
        text = f"ETA {clock(min(expected, latest))}, " + text.removeprefix("the ramp ")
    return text


def clock(unix_s: float) -> str:
    """A local wall-clock time, HH:MM:SS."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))
