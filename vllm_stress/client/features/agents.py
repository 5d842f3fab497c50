"""The agent user's task script."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import PATH

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--agent-task",
        default="",
        form=PATH,
        help="Agent user: the task script (JSON: docs/guides/agents.md); '' : the built-in one",
    )
