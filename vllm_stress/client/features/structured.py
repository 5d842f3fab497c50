"""Structured outputs: requests that carry a JSON schema their answer must follow."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import PATH

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--json-schema",
        default="",
        form=PATH,
        help="Chat and completions users: a JSON schema file, or a folder of *.json schemas taken in turn, each "
        "answer must follow (docs/guides/structured-outputs.md)",
    )
    group.add_argument(
        "--json-schema-share",
        type=float,
        default=1.0,
        help="With --json-schema: share of requests that carry a schema (the rest: unconstrained)",
    )
    group.add_argument(
        "--json-schema-new-share",
        type=float,
        default=0.0,
        help="With --json-schema: share of those schemas made new (a property renamed): compiled afresh",
    )
