"""The levels' ramp and hold times in ``levels.csv``, from the load shape's events, and the level stamped on rows."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.client.recorder import Recorder
    from vllm_stress.master.runfiles import RunFiles


class LevelTimes:
    """The open level (users, ramp start, hold start or None) from ``hooks.level_*`` (``started``, ``held``,
    ``ended``), written to ``levels.csv`` when it closes."""

    def __init__(self, environment: Environment, recorder: Recorder, run: RunFiles) -> None:
        self.environment = environment
        self.recorder = recorder
        self.run = run
        self.open_level: tuple[int, float, float | None] | None = None

    def follow(self, target_user_count: int) -> None:
        """Without a load shape no level opens: the level is the runner's target user count."""
        if target_user_count and self.open_level is None:
            self.recorder.set_level(target_user_count)

    def close(self, now: float) -> None:
        """Write the open level, its hold ending ``now`` (a level never held: a zero-length hold at ``now``; a hold
        whose processes had not reported since it began: a zero-length hold at its start)."""
        if self.open_level and self.run.folder:
            users, ramp_start, hold_start = self.open_level
            hold_start = hold_start or now
            self.run.folder.write_level(users, ramp_start, hold_start, max(now, hold_start))
        self.open_level = None

    def started(self, environment: Environment, users: int, judged: bool = True, **_kw: object) -> None:
        """A level's ramp begins (announcing the level that is already ramping again changes nothing); not ``judged``:
        a stretch at users judged before, its rows stamped but no level opened."""
        if environment is not self.environment or (
            judged and self.open_level and self.open_level[0] == users and self.open_level[2] is None
        ):
            return
        now = time.time()
        self.close(now)
        self.recorder.set_level(users, measuring=False)
        self.open_level = (users, now, None) if judged else None

    def held(self, environment: Environment, hold_start: float | None = None, **_kw: object) -> None:
        if environment is self.environment and self.open_level:
            users, ramp_start, _ = self.open_level
            self.open_level = (users, ramp_start, time.time() if hold_start is None else hold_start)
            self.recorder.set_level(users, measuring=True)

    def ended(self, environment: Environment, hold_end: float | None = None, **_kw: object) -> None:
        if environment is self.environment:
            self.close(time.time() if hold_end is None else hold_end)
            self.recorder.set_level(self.recorder.level, measuring=False)
