"""Paged KV cache accounting as vLLM's block pool counts it, with automatic prefix caching and an optional CPU
offload tier as vLLM's OffloadingConnector keeps one (docs/concepts/simulator.md, section 5; docs/concepts/kv-tiers.md)."""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from ..model.profiles import Profile
from .residency import Residency
from .steptime import kv_bytes_per_token_per_rank

if TYPE_CHECKING:  # the engine imports this module
    from .sequence import Sequence


def num_gpu_blocks(profile: Profile) -> int:
    """Number of KV blocks of one engine (override, or from memory as vLLM computes it)."""
    if profile.num_gpu_blocks_override:
        blocks = profile.num_gpu_blocks_override
    else:
        weights_per_rank = profile.weight_bytes * profile.params_total / profile.tensor_parallel_size
        available = profile.gpu_memory_utilization * profile.memory_bytes - weights_per_rank
        block_bytes = kv_bytes_per_token_per_rank(profile) * profile.block_size
        blocks = int(available // block_bytes)
    needed = -(-profile.max_model_len // profile.block_size) + 1
    if blocks < needed:
        raise ValueError(
            f"{blocks} KV blocks of {profile.block_size} tokens cannot hold one request of max_model_len="
            f"{profile.max_model_len} tokens ({needed} blocks needed); lower max_model_len or raise memory"
        )
    return blocks


def num_cpu_blocks(profile: Profile) -> int:
    """Blocks of the CPU tier: ``--kv-offloading-size`` GiB of host memory over one block's KV bytes on one rank (each
    rank offloads its own share, as vLLM's CPUOffloadingSpec divides the size by the world size); 0 without one."""
    block_bytes = kv_bytes_per_token_per_rank(profile) * profile.block_size
    per_rank = profile.kv_offloading_size * 2**30 / profile.tensor_parallel_size
    return int(per_rank // block_bytes)


class HostTier:
    """The CPU tier: hashes of the blocks it holds, least recently stored or loaded first; a store past its capacity
    drops the least recent (vLLM's CPU offloading manager with its LRU policy)."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.num_stored = 0  # blocks copied in since the start (one it holds already is not copied again)
        self.lookup_tokens = 0  # prompt tokens it was asked about at their first admission, whole prompts (as
        # LMCache counts its lookups)
        self.lookup_hits = 0  # of which it held then, from each prompt's start

    def store(self, block_hash: int) -> None:
        """Keep ``block_hash`` as the most recent block, dropping the least recent one when full."""
        self.num_stored += block_hash not in self.blocks
        self.blocks[block_hash] = None
        self.blocks.move_to_end(block_hash)
        if len(self.blocks) > self.num_blocks:
            self.blocks.popitem(last=False)

    def lookup(self, block_hashes: tuple[int, ...] | list[int]) -> int:
        """How many of ``block_hashes``, from the first, it holds."""
        count = 0
        for block_hash in block_hashes:
            if block_hash not in self.blocks:
                break
            count += 1
        return count

    def touch(self, block_hashes: tuple[int, ...] | list[int]) -> None:
        """Loaded blocks become the most recent."""
        for block_hash in block_hashes:
            self.blocks.move_to_end(block_hash)

    def clear(self) -> None:
        """Drop every block (vLLM's reset of the connector's cache)."""
        self.blocks.clear()


def prompt_block_hashes(token_ids: list[int], block_size: int) -> tuple[int, ...]:
    """Chained hashes of the full blocks of a prompt: equal hashes mean equal prefixes up to that block."""
    hashes, parent = [], None
    for end in range(block_size, len(token_ids) + 1, block_size):
        parent = hash((parent, *token_ids[end - block_size : end]))
        hashes.append(parent)
    return tuple(hashes)


class KVCache:
    """Free-block counts and the prefix cache; sequences keep their own block count in ``seq.num_blocks``, the hashes
    of the cached blocks they hold in ``seq.cached_blocks`` and how many prompt blocks were hashed in
    ``seq.num_hashed``. With a CPU tier (``host``) every block the GPU registers is also stored there, as vLLM's
    OffloadingConnector stores each newly computed block, so a block the GPU evicts is still found on the host. With
    ``residency`` (--kv-cache-metrics) the cached blocks' births, prefix hits and evictions are reported to it."""

    def __init__(self, num_blocks: int, block_size: int, caching: bool, host: HostTier | None = None) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.usable_blocks = num_blocks - 1
        self.empty_blocks = self.usable_blocks  # free blocks that hold no cached prefix
        self.refs: dict[int, int] = {}  # hash of a cached block -> sequences holding it
        self.evictable: OrderedDict[int, None] = OrderedDict()  # cached blocks held by none, least recently freed first
        self.host = host
        self.residency: Residency | None = None  # set by Engine.track_residency

    @property
    def free_blocks(self) -> int:
        """vLLM's ``get_num_free_blocks``: cached blocks nobody holds are free."""
        return self.empty_blocks + len(self.evictable)

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def lookup(self, seq: Sequence) -> list[int]:
        """Hashes of the longest run of ``seq``'s leading blocks that are cached, leaving at least its last token to
        compute (``get_computed_blocks``: ``max_cache_hit_length = num_tokens - 1``)."""
        limit = (seq.prompt_len + seq.num_output - 1) // self.block_size
        hits = []
        for block_hash in seq.block_hashes[:limit]:
            if block_hash not in self.refs:
                break
            hits.append(block_hash)
        return hits

    def host_hits(self, seq: Sequence, num_gpu_hits: int) -> list[int]:
        """Hashes of the blocks after ``seq``'s first ``num_gpu_hits`` that the CPU tier holds, with ``lookup``'s
        limit (vLLM's connector is asked for the tokens past the GPU's hits: ``get_num_new_matched_tokens``)."""
        if self.host is None:
            return []
        limit = (seq.prompt_len + seq.num_output - 1) // self.block_size
        candidates = seq.block_hashes[num_gpu_hits:limit]
        return list(candidates[: self.host.lookup(candidates)])

    def host_prefix(self, seq: Sequence) -> int:
        """Tokens of ``seq``'s prompt the CPU tier holds from its start, as a connector looks up a whole prompt
        (LMCache's lookups); 0 without a tier."""
        if self.host is None:
            return 0
        return self.host.lookup(seq.block_hashes[: seq.prompt_len // self.block_size]) * self.block_size

    def loaded_from_host(self, block_hashes: list[int]) -> None:
        """Blocks ``host_hits`` found, loaded for an admitted sequence: the CPU tier's most recent."""
        if self.host is not None:
            self.host.touch(block_hashes)

    def allocate(
        self, seq: Sequence, num_tokens: int, reserve_tokens: int = 0, hits: list[int] | tuple[int, ...] = ()
    ) -> bool:
        """Grow ``seq`` to hold ``num_tokens`` tokens, the first ones in the cached blocks ``hits`` (from
        ``lookup``, at admission); fail, changing nothing, if the blocks for ``max(num_tokens, reserve_tokens)``
        are not free. The full prompt blocks the tokens reach are registered in the cache."""
        if (
            num_tokens <= seq.num_blocks * self.block_size
            and not (hits or reserve_tokens)
            and seq.num_hashed >= len(seq.block_hashes)
        ):
            return True  # a decode step inside its last block (most steps): nothing to take or register
        needed = self.blocks_for(max(num_tokens, reserve_tokens)) - seq.num_blocks
        if hits:  # held hits are shared; free ones are taken out of the free blocks
            needed += sum(1 for block_hash in hits if not self.refs[block_hash]) - len(hits)
        if needed > self.free_blocks:
            return False
        if hits:
            self._share(seq, hits)
        grow = self.blocks_for(num_tokens) - seq.num_blocks
        if grow > 0:
            self._take(grow)
            seq.num_blocks += grow
        if self.caching and seq.num_hashed < len(seq.block_hashes):
            self._register(seq, num_tokens // self.block_size)
        return True

    def _share(self, seq: Sequence, hits: list[int] | tuple[int, ...]) -> None:
        refs = self.refs
        for block_hash in hits:
            if not refs[block_hash]:
                del self.evictable[block_hash]
            refs[block_hash] += 1
        seq.cached_blocks = list(hits)
        seq.num_hashed = seq.num_blocks = len(hits)
        if self.residency is not None:  # vLLM's BlockPool.touch: an access of each block hit
            self.residency.accessed(hits)

    def _take(self, count: int) -> None:
        empty = min(count, self.empty_blocks)
        self.empty_blocks -= empty
        residency = self.residency
        for _ in range(count - empty):
            block_hash, _ = self.evictable.popitem(last=False)
            del self.refs[block_hash]
            if residency is not None:
                residency.evicted(block_hash)

    def _register(self, seq: Sequence, num_full_blocks: int) -> None:
        for block_hash in seq.block_hashes[seq.num_hashed : num_full_blocks]:
            if block_hash not in self.refs:
                self.refs[block_hash] = 1
                seq.cached_blocks.append(block_hash)
                if self.host is not None:
                    self.host.store(block_hash)
                if self.residency is not None:
                    self.residency.born(block_hash)
        seq.num_hashed = min(num_full_blocks, len(seq.block_hashes))

    def release(self, seq: Sequence) -> None:
        """Free all of ``seq``'s blocks; cached ones keep their hash and become evictable, tail first."""
        refs = self.refs
        for block_hash in reversed(seq.cached_blocks):
            refs[block_hash] -= 1
            if not refs[block_hash]:
                self.evictable[block_hash] = None
        self.empty_blocks += seq.num_blocks - len(seq.cached_blocks)
        seq.num_blocks = seq.num_hashed = 0
        seq.cached_blocks = []

    def reset_prefix_cache(self) -> bool:
        """vLLM's ``BlockPool.reset_prefix_cache``: only when no sequence holds a block (False otherwise, nothing
        changed), every cached block forgotten, so no prompt hits what came before."""
        if self.free_blocks != self.usable_blocks:
            return False
        self.refs.clear()
        self.evictable.clear()
        self.empty_blocks = self.usable_blocks
        if self.residency is not None:
            self.residency.reset()
        return True

    @property
    def usage(self) -> float:
        return 1.0 - self.free_blocks / self.usable_blocks
