"""Where the ramp is, for the LLM tab and the dashboard: the load shape's phase and the levels held so far."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from vllm_stress.master import hooks

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.core.steady import Verdict


class RampProgress:
    def __init__(self, environment: Environment) -> None:
        self.environment = environment
        self.phase_text = ""  # what the load shape is doing ...
        self.phase_since = 0.0  # ... since when (unix seconds)
        self.phase_limit_s: float | None = None  # ... and for how long at most
        self.level_results: list[
            dict[str, object]
        ] = []  # per level held: users, steady, reason, output tok/s, schedule lag, e2e p50 (live
        # estimates) and, once the dashboard has read it (vllm_stress/webui/bound.py), its bound
        environment.events.test_start.add_listener(self._on_test_start)
        hooks.phase_changed.add_listener(self._on_phase)
        hooks.level_ended.add_listener(self._on_level_ended)

    def text(self) -> str:
        """The phase with the time spent in it and the time left at most, or "" without a load shape."""
        if not self.phase_text:
            return ""
        elapsed = time.time() - self.phase_since
        left = "" if self.phase_limit_s is None else f", at most {max(self.phase_limit_s - elapsed, 0):.0f} s left"
        return f"{self.phase_text} — {elapsed:.0f} s in{left}"

    def _on_test_start(self, **_kw: object) -> None:
        self.level_results.clear()

    def _on_phase(self, environment: Environment, text: str, limit_s: float | None, **_kw: object) -> None:
        if environment is self.environment:
            self.phase_text, self.phase_since, self.phase_limit_s = text, time.time(), limit_s

    def _on_level_ended(
        self,
        environment: Environment,
        users: int,
        verdict: Verdict | None,
        output_tokens_per_s: float,
        schedule_lag_p99_s: float = float("nan"),
        **_kw: object,
    ) -> None:
        if environment is self.environment and verdict is not None:
            self.level_results.append(
                {
                    "users": users,
                    "steady": verdict.steady,
                    "reason": verdict.reason,
                    "output_tokens_per_s": output_tokens_per_s,
                    "schedule_lag_p99_s": schedule_lag_p99_s,
                    "e2e_p50_s": verdict.e2e_p50_s,  # of the hold's measured requests: the read-behind rule's scale
                }
            )
