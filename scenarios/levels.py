"""Parsing and checking of a ramp's levels (shared by the shape and the runner)."""

from __future__ import annotations


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


RAMP_TIMES = ("step-time", "warmup", "cooldown", "ramp-time")  # the shape's options in seconds


def check_times(times: dict[str, object]) -> None:
    """``{"step-time": 60, ...}``: each must be a number of seconds, at least 0; a clear ValueError otherwise."""
    for flag, value in times.items():
        try:
            ok = float(value) >= 0
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ValueError(f"--{flag} must be a number of seconds, at least 0, got {value!r}")
