"""The load profile's options: the model, the lengths of prompts and answers, how requests are sent."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup

DEFAULT_INPUT_TOKENS = 2048
DEFAULT_OUTPUT_TOKENS = 512
TOKEN_DISTRIBUTIONS = ("fixed", "uniform", "normal")


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--model", default="", help="Model name sent in requests (default: the first model the server lists)"
    )
    group.add_argument(
        "--input-tokens",
        type=int,
        default=DEFAULT_INPUT_TOKENS,
        help="Prompt length in tokens, chat template included, measured with the server's /tokenize",
    )
    group.add_argument(
        "--output-tokens",
        type=int,
        default=DEFAULT_OUTPUT_TOKENS,
        help="Output length in tokens (max_tokens, forced with ignore_eos and min_tokens)",
    )
    group.add_argument(
        "--token-dist",
        choices=TOKEN_DISTRIBUTIONS,
        default="fixed",
        help="Distribution of input and output lengths around their targets",
    )
    group.add_argument(
        "--token-spread",
        type=float,
        default=0.0,
        help="uniform: +/- this fraction of the target; normal: the standard deviation as a fraction",
    )
    group.add_argument(
        "--no-stream",
        action="store_true",
        default=False,
        help="Send non-streaming requests (no TTFT/ITL; e2e and token counts only)",
    )
    group.add_argument(
        "--no-ignore-eos",
        action="store_true",
        default=False,
        help="Let the model stop early: do not send ignore_eos/min_tokens",
    )
    group.add_argument("--temperature", type=float, default=None, help="Sampling temperature (server default if unset)")
