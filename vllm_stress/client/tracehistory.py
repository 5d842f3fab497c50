"""KV-block ids for recorded sessions whose traces count tokens but keep no text (OpenTelemetry spans, TraceLab
rounds): each conversation one token stream, its prompts and answers in turn, cut into blocks of
``HISTORY_BLOCK_TOKENS`` tokens; a prompt is the ids of the stream's blocks it covers, so that a prompt repeating
an earlier one's history is made of the same blocks (the same words in a replay), and the server's prefix cache sees
that reuse."""

from __future__ import annotations

from collections.abc import Iterator

HISTORY_BLOCK_TOKENS = 16  # tokens of one block id: vLLM's default KV block, fine enough to keep a history's prefix


class GrowingHistory:
    """One conversation's token stream as block ids, drawn from ``ids`` (shared by a trace's conversations, so that
    two of them have no block in common)."""

    def __init__(self, ids: Iterator[int]) -> None:
        self.ids = ids
        self.blocks: list[int] = []  # the stream's blocks, the last one perhaps partly filled
        self.tokens = 0  # the stream's length
        self.prompts = 0  # the last prompt's length
        self.sent: set[int] = set()  # the blocks an earlier prompt had

    def prompt(self, shared: int, tokens: int) -> tuple[tuple[int, ...], int]:
        """The block ids of a prompt of ``tokens`` tokens whose first ``shared`` are the stream's (at most the whole
        stream; only its whole blocks are kept, a partly shared block is a new one), and how many of them an earlier
        prompt had. The stream is then this prompt."""
        kept = min(shared, self.tokens, tokens) // HISTORY_BLOCK_TOKENS
        self.blocks = self.blocks[:kept] + self.fresh(blocks_of(tokens) - kept)
        self.tokens = self.prompts = tokens
        hash_ids = tuple(self.blocks)
        reused = sum(block in self.sent for block in hash_ids)
        self.sent.update(hash_ids)
        return hash_ids, reused

    def grown(self, tokens: int) -> tuple[tuple[int, ...], int]:
        """A prompt that carries the whole stream on when it is no shorter than the last prompt (its history, the
        answer and new tokens), else starts over (a history cut or dropped): ``prompt``'s ids and reuse."""
        return self.prompt(self.tokens if tokens >= self.prompts else 0, tokens)

    def answer(self, tokens: int) -> None:
        """The answer to the last prompt: ``tokens`` more of the stream, in blocks no prompt had yet."""
        self.tokens += tokens
        self.blocks += self.fresh(blocks_of(self.tokens) - len(self.blocks))

    def fresh(self, count: int) -> list[int]:
        return [next(self.ids) for _ in range(count)]


def blocks_of(tokens: int) -> int:
    """The blocks ``tokens`` tokens fill, the last one perhaps partly."""
    return -(-tokens // HISTORY_BLOCK_TOKENS)
