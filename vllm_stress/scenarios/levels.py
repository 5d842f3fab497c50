"""A ramp's options: their defaults, parsing and checks (shared by the shape and the runner), and its ETA."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

AUTO = "auto"  # --step-time auto: hold each level until it is steady (vllm_stress.core.steady), at most --max-step-time
RAMP_DEFAULTS = {  # option -> default, as Locust's config files and command lines spell them
    "levels": "10,50,100,200,500,750,1000",
    "step-time": "60",
    "max-step-time": "600",
    "warmup": "5",
    "cooldown": "0",
    "ramp-time": "5",
}
RAMP_TIMES = ("step-time", "max-step-time", "warmup", "cooldown", "ramp-time")  # the shape's options in seconds


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
    bounds (with ``auto`` the warm-up and the hold may each last up to --max-step-time) and a margin."""
    value = {key: keys.get(key, default) for key, default in RAMP_DEFAULTS.items()}
    hold = step_seconds(value["step-time"])
    bound = float(value["max-step-time"])
    per_level = float(value["ramp-time"]) + float(value["cooldown"]) + max(float(value["warmup"]), bound)
    per_level += bound if hold is None else hold
    return len(parse_levels(value["levels"])) * (per_level + 30) + 120


@dataclass(frozen=True)
class LevelPace:
    """A level done: its users, how long it took (from its ramp to the next level's) and its requests' lifetime
    (e2e p50 of its window)."""

    users: int
    seconds: float
    lifetime_s: float


def expected_lifetime_s(users: int, done: list[LevelPace]) -> float:
    """A request's lifetime at ``users``, by Little's law from the levels done: a closed loop of N users served at X
    requests/s keeps each request N / X s; X grows no further than the best of the levels done (N / lifetime), and a
    request lives no shorter than at the last one."""
    best_rate = max(pace.users / pace.lifetime_s for pace in done)
    return max(done[-1].lifetime_s, users / best_rate)


def expected_level_s(users: int, done: list[LevelPace]) -> float:
    """How long a level of ``users`` takes: a fixed part (ramp, checks, cooldown) and a number of request lifetimes
    (warm-up and hold), fitted to the levels done (the ratio of the last one when their lifetimes do not differ; their
    mean length when no request of theirs ended)."""
    timed = [pace for pace in done if pace.lifetime_s > 0]  # a level with no request ended says nothing of lifetimes
    if not timed:
        return float(np.mean([pace.seconds for pace in done]))
    done = timed
    lifetimes = [pace.lifetime_s for pace in done]
    seconds = [pace.seconds for pace in done]
    slope = float(np.polyfit(lifetimes, seconds, 1)[0]) if len(set(lifetimes)) > 1 else 0.0
    if slope <= 0:
        return seconds[-1] / lifetimes[-1] * expected_lifetime_s(users, done)
    fixed = max(float(np.mean(seconds)) - slope * float(np.mean(lifetimes)), 0.0)
    return fixed + slope * expected_lifetime_s(users, done)


def ramp_eta(now: float, left: list[int], done: list[LevelPace], level_started: float, level_s: float) -> str:
    """When a ramp ends whose levels ``left`` are still to run, the first since ``level_started``: each as long as
    the levels ``done`` say (``expected_level_s``; from the second level on, this one ending no earlier than
    ``now``), and at the latest, with this level and the rest each at their bound (``level_s``)."""
    latest = now + len(left) * level_s
    text = f"the ramp ends by {clock(latest)} at the latest"
    if done:
        this, *rest = (min(expected_level_s(n, done), level_s) for n in left)
        expected = min(max(level_started + this, now) + sum(rest), latest)
        text = f"ETA {clock(expected)}, " + text.removeprefix("the ramp ")
    return text


def clock(unix_s: float) -> str:
    """A local wall-clock time, HH:MM:SS."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))
