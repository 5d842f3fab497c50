"""Paged KV cache accounting: blocks of ``block_size`` tokens, as vLLM's block pool counts them.

vLLM sizes the cache once at start-up (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``,
``vllm/v1/core/kv_cache_utils.py`` ``get_num_blocks``): ``gpu_memory_utilization x device memory - weights``, divided
by the bytes one block takes on one rank; ``--num-gpu-blocks-override`` replaces the result. One block is the
reserved "null" block, and ``vllm:kv_cache_usage_perc`` is ``1 - free / (num_blocks - 1)``
(``vllm/v1/core/block_pool.py`` ``get_usage``). A request holds ``ceil(tokens / block_size)`` blocks for the tokens
computed so far; start-up fails if one ``max_model_len`` request cannot fit (``kv_cache_planning.py``).
Only block counts matter here: no contents, no prefix cache.
"""

from __future__ import annotations

from .profiles import Profile
from .steptime import kv_bytes_per_token_per_rank


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


class KVCache:
    """Free-block counter; sequences keep their own block count in ``seq.num_blocks``."""

    def __init__(self, num_blocks: int, block_size: int) -> None:
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.usable_blocks = num_blocks - 1
        self.free_blocks = self.usable_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def allocate(self, seq, num_tokens: int, reserve_tokens: int = 0) -> bool:
        """Grow ``seq`` to hold ``num_tokens`` tokens; fail (allocating nothing) if the blocks for
        ``max(num_tokens, reserve_tokens)`` are not free."""
        needed = self.blocks_for(max(num_tokens, reserve_tokens)) - seq.num_blocks
        if needed > self.free_blocks:
            return False
        grow = self.blocks_for(num_tokens) - seq.num_blocks
        if grow > 0:
            self.free_blocks -= grow
            seq.num_blocks += grow
        return True

    def release(self, seq) -> None:
        self.free_blocks += seq.num_blocks
        seq.num_blocks = 0

    @property
    def usage(self) -> float:
        return 1.0 - self.free_blocks / self.usable_blocks
