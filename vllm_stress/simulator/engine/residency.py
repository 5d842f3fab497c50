"""vLLM's KV-cache residency metrics (``--kv-cache-metrics``, ``--kv-cache-metrics-sample``): a sample of the cached
blocks, each followed from its birth through its prefix hits to its eviction, which yields its lifetime, its idle time
before the eviction and the gaps between its last accesses (docs/concepts/simulator.md, section 11). The prefix cache
(kvcache.py) reports the blocks it caches by hash; the times are the engine's clock."""

from __future__ import annotations

import argparse
import itertools
import random
from collections import deque
from collections.abc import Callable, Iterable
from typing import NamedTuple

DEFAULT_SAMPLE = 0.01  # vLLM's default share of the blocks followed
ACCESSES_KEPT = 4  # as vLLM: the last 4 accesses of a block, so at most 3 reuse gaps per eviction


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--kv-cache-metrics",
        action="store_true",
        help="export the KV cache's residency histograms as vllm serve does with this flag: "
        "vllm:kv_block_lifetime_seconds, vllm:kv_block_idle_before_evict_seconds and "
        "vllm:kv_block_reuse_gap_seconds, of a sample of the cached (full, hashed) prompt blocks",
    )
    parser.add_argument(
        "--kv-cache-metrics-sample",
        type=float,
        default=DEFAULT_SAMPLE,
        metavar="RATE",
        help="share of the cached blocks --kv-cache-metrics follows, in (0, 1] (%(default)s, as vLLM)",
    )


def sample_from_args(args: argparse.Namespace) -> float | None:
    """The sample rate of the residency metrics the flags ask for, or None without --kv-cache-metrics; ValueError for a
    rate outside (0, 1] (checked with the flag or without, as vLLM checks it)."""
    rate = args.kv_cache_metrics_sample
    if not 0 < rate <= 1:
        raise ValueError(f"--kv-cache-metrics-sample must be in (0, 1], got {rate}")
    return rate if args.kv_cache_metrics else None


class Eviction(NamedTuple):
    """One followed block's eviction, in seconds of engine time."""

    lifetime: float  # from its birth
    idle: float  # since its last access (its birth if none)
    reuse_gaps: tuple[float, ...]  # between its consecutive accesses, of the last ACCESSES_KEPT


class _Followed:
    __slots__ = ("accesses", "born")

    def __init__(self, born: float) -> None:
        self.born = born
        self.accesses: deque[float] = deque(maxlen=ACCESSES_KEPT)  # its birth is not an access


class Residency:
    """The followed blocks by hash, and the evictions not yet observed (``drain``). ``clock`` gives the engine time
    now; ``seed`` makes the sample reproducible."""

    def __init__(self, sample: float, clock: Callable[[], float], seed: int = 0) -> None:
        self.sample = sample
        self.clock = clock
        self.random = random.Random(seed)
        self.blocks: dict[int, _Followed] = {}
        self.evictions: list[Eviction] = []

    def born(self, block_hash: int) -> None:
        """A block the cache registered: followed with the sample's chance."""
        if self.random.random() < self.sample:
            self.blocks[block_hash] = _Followed(self.clock())

    def accessed(self, block_hashes: Iterable[int]) -> None:
        """Cached blocks a sequence found as its prefix."""
        now = None
        for block_hash in block_hashes:
            followed = self.blocks.get(block_hash)
            if followed is not None:
                now = self.clock() if now is None else now
                followed.accesses.append(now)

    def evicted(self, block_hash: int) -> None:
        """A cached block the cache dropped to reuse its memory."""
        followed = self.blocks.pop(block_hash, None)
        if followed is None:
            return
        now, accesses = self.clock(), followed.accesses
        gaps = tuple(later - earlier for earlier, later in itertools.pairwise(accesses))
        self.evictions.append(Eviction(now - followed.born, now - (accesses[-1] if accesses else followed.born), gaps))

    def reset(self) -> None:
        """The prefix cache was reset: no block is followed any more. Evictions not yet drained stay: vLLM's engine
        has reported them with the step that made them, before any reset."""
        self.blocks.clear()

    def drain(self) -> list[Eviction]:
        """The evictions since the last drain."""
        evictions, self.evictions = self.evictions, []
        return evictions
