"""LoRA adapters drawn per request: the model name each request asks for, from a pool of names (``--lora-adapters``)
drawn uniformly or by Zipf's law (``--lora-distribution``), seeded so that a process draws the same sequence every
run. vLLM serves an adapter under its own model name (``--lora-modules``, ``/v1/load_lora_adapter``); the base
model's name may be in the pool too."""

from __future__ import annotations

import argparse
import bisect
import functools
import itertools
import random

from vllm_stress.core.lora import numbered_adapters

DEFAULT_ZIPF_S = 1.0  # Zipf's exponent when --lora-distribution says zipf without one: weight of the k-th name 1/k


def adapter_names(text: str) -> tuple[str, ...]:
    """The pool ``--lora-adapters`` names: a count N (``adapter-0`` .. ``adapter-N-1``) or comma-separated names;
    () for an empty text. ValueError for a count below 1 or a repeated name."""
    text = text.strip()
    if not text:
        return ()
    if text.isdigit():
        if int(text) < 1:
            raise ValueError("--lora-adapters: a count must be at least 1")
        return numbered_adapters(int(text))
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    if len(set(names)) != len(names):
        raise ValueError(f"--lora-adapters: a name is repeated in {text!r}")
    return names


def weights(distribution: str, count: int) -> list[float]:
    """The draw weights of ``count`` names: ``uniform``, or ``zipf[:s]`` (the k-th name's weight 1/k^s, the first
    name the most drawn). ValueError for another distribution or a negative s."""
    kind, _, exponent = distribution.partition(":")
    if kind == "uniform" and not exponent:
        return [1.0] * count
    if kind != "zipf":
        raise ValueError(f"--lora-distribution: expected uniform or zipf[:s], got {distribution!r}")
    try:
        s = float(exponent) if exponent else DEFAULT_ZIPF_S
    except ValueError:
        raise ValueError(f"--lora-distribution: zipf's exponent must be a number, got {exponent!r}") from None
    if s < 0:
        raise ValueError(f"--lora-distribution: zipf's exponent must not be negative, got {s}")
    return [1.0 / (rank**s) for rank in range(1, count + 1)]


class AdapterPool:
    """Draws the model name of each request from ``names`` with ``distribution``'s weights, seeded."""

    def __init__(self, names: tuple[str, ...], distribution: str = "uniform", seed: int = 0) -> None:
        if not names:
            raise ValueError("an adapter pool needs at least one name")
        self.names = names
        self.cumulative = list(itertools.accumulate(weights(distribution, len(names))))
        self._rng = random.Random(seed)

    def draw(self) -> str:
        point = self._rng.random() * self.cumulative[-1]
        return self.names[min(bisect.bisect_right(self.cumulative, point), len(self.names) - 1)]


def model_field(adapter: str) -> dict[str, str]:
    """The request body's model for a drawn adapter (it replaces --model's), {} when none was drawn."""
    return {"model": adapter} if adapter else {}


@functools.cache
def _pool(names: tuple[str, ...], distribution: str, seed: int) -> AdapterPool:
    return AdapterPool(names, distribution, seed)


def adapter_pool(options: argparse.Namespace) -> AdapterPool | None:
    """The process's pool for its options (one per process, shared by its users, so its draws are one seeded
    sequence), or None without ``--lora-adapters``."""
    names = adapter_names(options.lora_adapters)
    return _pool(names, options.lora_distribution, options.lora_seed) if names else None


def check_options(options: argparse.Namespace) -> None:
    """ValueError for --lora-adapters or --lora-distribution values that cannot be drawn from."""
    names = adapter_names(options.lora_adapters)
    weights(options.lora_distribution, len(names))
