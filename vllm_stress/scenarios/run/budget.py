"""``--max-minutes``: the time budget of ``vllm-stress run``, from its start to its report. Each run (repeat) gets what
is left of it, less a reserve for the report, as its step ramp's own ``--max-minutes`` (the ramp cuts the levels that no
longer fit, vllm_stress/scenarios/shapes/shape.py); a repeat that would start with too little left is cut."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from vllm_stress.scenarios.shapes.levels import clock

log = logging.getLogger("scenarios")

# Kept aside from the budget: the Locust processes' start (workers connecting) and stop, and the analysis.
REPORT_RESERVE_S = 60.0
STOP_GRACE_S = 30.0  # a run still going this long after its budget is stopped
LEAST_RUN_S = 60.0  # a repeat after the first with less than this left is cut: it could hardly hold one level


@dataclass
class Budget:
    """``minutes`` from ``started`` (unix time); 0 minutes: no budget."""

    minutes: float
    started: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.minutes < 0:
            raise ValueError(f"--max-minutes must be at least 0 (0: no bound), got {self.minutes:g}")

    def runs_left_s(self) -> float:
        """Seconds left for the runs: the budget's end less the report's reserve, less what is used."""
        return self.started + self.minutes * 60 - REPORT_RESERVE_S - time.time()

    def announce(self) -> None:
        """The console's first ETA: when the report is written at the latest."""
        if self.minutes:
            end = self.started + self.minutes * 60
            runs_min = max(self.minutes * 60 - REPORT_RESERVE_S, LEAST_RUN_S) / 60
            log.info(
                "time budget %g min (--max-minutes): %g for the runs, then the report, by %s at the latest",
                self.minutes,
                runs_min,
                clock(end),
            )

    def run_args(self, repeat: int, repeats: int) -> list[str] | None:
        """The step ramp's --max-minutes for this repeat, [] with no budget, or None (logged) when it is cut."""
        if not self.minutes:
            return []
        left_s = self.runs_left_s()
        if repeat == 1:  # the first run runs, however short the budget: a report needs one
            left_s = max(left_s, LEAST_RUN_S)
        elif left_s < LEAST_RUN_S:
            used_min = (time.time() - self.started) / 60
            cut = f"run {repeat}" if repeat == repeats else f"runs {repeat} to {repeats}"
            log.warning("%s of %d cut: %.1f of %g min used", cut, repeats, used_min, self.minutes)
            return None
        return [f"--max-minutes={left_s / 60:.3f}"]

    def limit_s(self, bound_s: float) -> float:
        """How long a run may last before it is stopped: its own bound, or the budget left and a grace period."""
        return min(bound_s, max(self.runs_left_s(), LEAST_RUN_S) + STOP_GRACE_S) if self.minutes else bound_s
