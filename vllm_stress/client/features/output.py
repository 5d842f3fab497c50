"""Where the run's files go."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import COMMAND_LINE, PATH

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--results-dir",
        default="",
        form=PATH,
        help="Folder for requests.csv and the run files "
        "(default: results/run-<time>); the master refuses a folder that already holds a run",
    )
    group.add_argument(
        "--server-launch",
        default="",
        form=COMMAND_LINE,
        help="Set by python -m scenarios: how it started the server (JSON), kept in run.json",
    )
    group.add_argument(
        "--overwrite",
        action="store_true",
        default=False,
        form=COMMAND_LINE,
        help="Allow --results-dir to hold an earlier run (its files are replaced)",
    )
