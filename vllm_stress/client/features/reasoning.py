"""Requests to reasoning models: thinking on or off, its budget, the reasoning effort."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--thinking",
        choices=("on", "off"),
        default="on",
        help="Chat requests to a reasoning model: off sends chat_template_kwargs enable_thinking=false (Qwen3's "
        "switch) and thinking=false (DeepSeek-V3.1+'s and Kimi-K2's): no reasoning; on leaves the template's default",
    )
    group.add_argument(
        "--reasoning-budget",
        type=int,
        default=0,
        help="Chat requests to a reasoning model: the thinking tokens each request may decode besides --output-tokens, "
        "which then bounds the answer (max_tokens = output + budget: with ignore_eos a model that thinks at most the "
        "budget answers with at least --output-tokens). 0: --output-tokens bounds every decode token, thinking "
        "included, as vLLM's max_tokens does",
    )
    group.add_argument(
        "--reasoning-effort",
        choices=("low", "medium", "high"),
        default=None,
        help="Chat requests: send reasoning_effort (vLLM's chat API field, read by chat templates that have one, such "
        "as gpt-oss's; other models ignore it). Unset: not sent",
    )
