"""A target prefix-cache hit rate (--prefix-hit-rate): how many leading tokens of each prompt to share, in whole KV
blocks, so that the server's hits / queries over the prompts sent equal the target (docs/concepts/prefix-hit-rate.md).

vLLM counts, per request admitted, its prompt tokens as queries and its leading full blocks found cached as hits. A
prompt that shares its first ``k`` blocks with an earlier one of its group, and whose next block differs, hits
``k * block_size`` tokens; the share of each prompt is rounded to whole blocks, the rounding carried to the next prompt
(error diffusion), so the sum of the shared tokens follows ``rate`` times the sum of the prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_BLOCK_SIZE = 16  # vLLM's --block-size on GPUs


@dataclass
class SharedBlocks:
    """The shared part of each prompt of one process: ``head`` tokens the chat template (or BOS) puts before the text,
    the same in every prompt, and ``tail`` after it."""

    rate: float
    block_size: int = DEFAULT_BLOCK_SIZE
    head: int = 0
    tail: int = 0
    carried: float = field(default=0.0, init=False)  # target shared tokens not yet given (negative: given ahead)

    def shared_tokens(self, prompt_tokens: int) -> int:
        """The leading tokens of a prompt of ``prompt_tokens`` tokens to share: whole blocks, at least the template's
        own full blocks (every prompt shares them), at most what leaves one token of the text its own."""
        size = self.block_size
        wanted = self.rate * prompt_tokens + self.carried
        shared = min(max(round(wanted / size) * size, self.fewest()), self.most(prompt_tokens))
        self.carried = min(max(wanted - shared, -size), size)  # an unreachable target does not pile up
        return shared

    def prefix_words(self, shared: int) -> int:
        """Words of the group's prefix that make ``shared`` leading tokens with the template's head (one token a word)."""
        return max(0, shared - self.head)

    def fewest(self) -> int:
        """The fewest tokens a prompt shares: the template's own full blocks, in every prompt."""
        return self.head // self.block_size * self.block_size

    def most(self, prompt_tokens: int) -> int:
        """The most tokens a prompt shares: whole blocks leaving at least one token of its text its own."""
        return max(self.fewest(), (prompt_tokens - self.tail - 1) // self.block_size * self.block_size)

    def reachable(self, prompt_tokens: int) -> bool:
        """Whether prompts of ``prompt_tokens`` tokens can share the target share of them."""
        return self.fewest() <= self.rate * prompt_tokens <= self.most(prompt_tokens)
