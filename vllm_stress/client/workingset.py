"""A working-set sweep's level in every process (``--shape working-set:...``, vllm_stress.core.workingset): how many
shared contexts the prompts come back to now, set on the master (or local runner) by the load shape and told to the
workers with the level (vllm_stress.client.recorder); the prompts take the contexts in turn, so each is revisited."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class LiveContexts:
    """The sweep's contexts now (None: no sweep runs) and the turn of the next prompt."""

    count: int | None = None
    turn: int = 0

    def next_group(self) -> int | None:
        """The context (prefix group) of the next prompt, round robin over the level's; None without a sweep."""
        if self.count is None:
            return None
        self.turn = (self.turn + 1) % self.count
        return self.turn


LIVE = LiveContexts()  # this process's
