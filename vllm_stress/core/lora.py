"""LoRA adapters' names shared by both sides: ``--lora-adapters N`` makes the load generator draw, and the
simulator serve, the adapters ``adapter-0`` .. ``adapter-N-1`` (docs/guides/lora.md)."""

from __future__ import annotations

ADAPTER_PREFIX = "adapter-"


def numbered_adapters(count: int) -> tuple[str, ...]:
    """The names ``--lora-adapters N`` stands for, N = ``count``."""
    return tuple(f"{ADAPTER_PREFIX}{index}" for index in range(count))
