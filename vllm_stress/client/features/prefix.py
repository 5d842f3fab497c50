"""Prefix caching on purpose: prompts of a group share their first tokens."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--prefix-tokens",
        type=int,
        default=0,
        help="Tokens at the start of every prompt shared by the prompts of its group (prefix caching "
        "on purpose; 0: every prompt random)",
    )
    group.add_argument(
        "--prefix-groups",
        type=int,
        default=1,
        help="Different shared prefixes, each request draws one (with --prefix-tokens)",
    )
