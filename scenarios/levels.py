"""A ramp's options: their defaults, parsing and checks (shared by the shape and the runner)."""

from __future__ import annotations

AUTO = "auto"  # --step-time auto: hold each level until it is steady (vllm_stress.steady), at most --max-step-time
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


def parse_run_of(text: str) -> tuple[int, int] | None:
    """``--run-of "2/5"`` (set by ``python -m scenarios run --repeats 5`` on each run's master) -> ``(2, 5)``; None
    when empty; a clear ValueError for anything else."""
    if not str(text).strip():
        return None
    run, _, runs = str(text).partition("/")
    if not (run.strip().isdigit() and runs.strip().isdigit() and 1 <= int(run) <= int(runs)):
        raise ValueError(f"--run-of must be K/N with 1 <= K <= N, got {text!r}")
    return int(run), int(runs)


def step_seconds(value: object) -> float | None:
    """--step-time as seconds, or None for ``auto``."""
    return None if str(value).strip() == AUTO else float(value)


def check_times(times: dict[str, object]) -> None:
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
