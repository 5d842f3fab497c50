"""LoRA adapters: the model of each request drawn from a set of adapters."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.adapters import DEFAULT_ZIPF_S

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--lora-adapters",
        default="",
        help="LoRA adapters each request's model is drawn from: comma-separated names (the base model may be one), or "
        "N for adapter-0 .. adapter-N-1; the row's adapter names it. Empty: --model",
    )
    group.add_argument(
        "--lora-distribution",
        default="uniform",
        help=f"With --lora-adapters: uniform, or zipf[:s] (the k-th name weighted 1/k^s, s={DEFAULT_ZIPF_S:g} by default)",
    )
    group.add_argument("--lora-seed", type=int, default=0, help="With --lora-adapters: each process's seed")
