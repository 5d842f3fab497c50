"""What an SLO search varies — users (closed loop) or requests/s (open loop) — and the range it may probe."""

from __future__ import annotations

import math
from dataclasses import dataclass

from vllm_stress.scenarios.run.errors import ScenarioError

OVER = {"users": (1, 1024), "rate": (1.0, 512.0)}  # what a search varies -> its default --low and --high
UNITS = {"users": "users", "rate": "req/s"}
DEFAULT_POOL_SECONDS = 10.0


@dataclass
class Space:
    """What a search varies — users (closed loop) or requests/s (open loop) — and its bracket."""

    over: str
    low: float
    high: float
    precision: float
    pool_seconds: float = DEFAULT_POOL_SECONDS

    @property
    def whole(self) -> bool:
        return self.over == "users"

    def users_for(self, load: float) -> int:
        """The users a probe runs: the load itself, or the open loop's pool for its rate."""
        return int(load) if self.whole else max(1, math.ceil(load * self.pool_seconds))

    def folder(self, load: float) -> str:
        return f"probe-{int(load)}" if self.whole else f"rate-{load:g}"

    def label(self, load: float) -> str:
        return f"{int(load)} users" if self.whole else f"{load:g} req/s ({self.users_for(load)} users)"

    def locust_args(self, load: float) -> list[str]:
        rate = [] if self.whole else [f"--arrival-rate={load:g}"]
        return [f"--levels={self.users_for(load)}", *rate]


def check_space(over: str, low: float | None, high: float | None, precision: float, pool_seconds: float) -> Space:
    """The search's Space from the command line, with a clear ScenarioError for values no search can use."""
    if over not in OVER:
        raise ScenarioError(f"--over must be one of {', '.join(OVER)}, got {over!r}")
    low = OVER[over][0] if low is None else low
    high = OVER[over][1] if high is None else high
    if over == "users" and not (float(low).is_integer() and float(high).is_integer()):
        raise ScenarioError(f"--low and --high are whole users over users, got {low:g} and {high:g}")
    if not 0 < low <= high:
        raise ScenarioError(f"--low and --high must be 0 < low <= high, got {low:g} and {high:g}")
    if not 0 < precision < 1 or not pool_seconds > 0:
        raise ScenarioError(
            f"--precision must be between 0 and 1 and --pool-seconds above 0, got {precision:g} and {pool_seconds:g}"
        )
    if over == "users":
        low, high = int(low), int(high)
    return Space(over, low, high, precision, pool_seconds)
