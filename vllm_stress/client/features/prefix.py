"""Prefix caching on purpose: prompts of a group share their first tokens, so many (--prefix-tokens) or so many
whole KV blocks that the server's hit rate is a target (--prefix-hit-rate, vllm_stress.client.hitrate)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import FIELD
from vllm_stress.client.hitrate import DEFAULT_BLOCK_SIZE

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
    group.add_argument(
        "--prefix-hit-rate",
        form=FIELD,
        type=float,
        default=None,
        help="The prefix-cache hit rate to make (0 to below 1): each prompt opens with as many whole KV blocks of "
        "its group's prefix, the chat template's included, as make the server's vllm:prefix_cache_hits / queries "
        "this share of its prompt tokens (instead of --prefix-tokens; with --prefix-groups)",
    )
    group.add_argument(
        "--kv-block-size",
        form=FIELD,
        type=int,
        default=None,
        help="Tokens of one KV block of the server (its --block-size), what --prefix-hit-rate shares whole "
        f"(default: the server's, read from its vllm:cache_config_info at test start; {DEFAULT_BLOCK_SIZE} when "
        "it exports none)",
    )
    group.add_argument(
        "--reset-prefix-cache",
        action="store_true",
        default=False,
        help="Empty the server's prefix cache (and its KV connector's) as each level of the step ramp begins, so no "
        "level hits what the one before cached: POST /reset_prefix_cache to each --host, which vLLM serves with "
        "VLLM_SERVER_DEV_MODE=1 (without it the run says its levels start warm)",
    )
