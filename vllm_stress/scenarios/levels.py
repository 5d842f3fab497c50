"""A ramp's options: their defaults, parsing and checks (shared by the shape and the runner)."""

from __future__ import annotations

import time
from collections.abc import Mapping

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


def ramp_eta(now: float, index: int, levels: int, ramp_started: float, level_started: float, level_s: float) -> str:
    """When a ramp at level ``index`` (0-based, started at ``level_started``) should end: at the pace of the levels
    done so far (from the second level on; this level ends no earlier than ``now``), and at the latest, with this
    level and the rest each at their bound (``level_s``)."""
    latest = now + (levels - index) * level_s
    text = f"the ramp ends by {clock(latest)} at the latest"
    if index:
        pace = (level_started - ramp_started) / index  # seconds per level done
        expected = min(max(level_started + pace, now) + (levels - index - 1) * pace, latest)
        text = f"ETA {clock(expected)}, " + text.removeprefix("the ramp ")
    return text


def clock(unix_s: float) -> str:
    """A local wall-clock time, HH:MM:SS."""
    return time.strftime("%H:%M:%S", time.localtime(unix_s))
