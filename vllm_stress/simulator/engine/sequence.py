"""One engine sequence and its timings, the type the engine core and its parts (KV cache, LoRA slots, priority queue,
speculative decoding) all hold; here, not in core.py, so that those parts need not import the engine."""

from __future__ import annotations

from collections import deque
from typing import Protocol


class Sink(Protocol):
    """Who is told when a sequence has new tokens (the real-time driver calls it once their step has ended)."""

    def on_token(self, seq: Sequence) -> None: ...


class Sequence:
    """One engine sequence: a request with ``n=1``, or one of the ``n`` children of a request.

    ``stop_after`` is the output length at which the sequence samples EOS and ends with ``stop`` (0: never, as with
    ``ignore_eos``); ``max_tokens`` 0 makes it a pooling request's (embeddings, scores): its prefill and nothing
    after, ended ``stop`` with no output token. ``sink`` and ``index`` belong to the caller (who to tell about tokens, which choice this is).
    ``block_hashes`` are the chained hashes of the prompt's full blocks (``kvcache.prompt_block_hashes``; the ``n``
    children of a request share them); without them the prompt never hits the prefix cache.
    """

    __slots__ = (
        "prompt_len",
        "max_tokens",
        "stop_after",
        "sink",
        "index",
        "block_hashes",
        "num_computed",
        "num_output",
        "num_blocks",
        "cached_blocks",
        "num_hashed",
        "num_cached_tokens",
        "num_external_tokens",
        "num_preemptions",
        "finish_reason",
        "arrival",
        "ready",
        "first_scheduled",
        "first_token",
        "previous_token",
        "last_token",
        "finished_at",
        "encoder_flops",
        "external_computed",
        "adapter",
        "num_drafts",
        "step_ends",
        "priority",
        "grammar",
        "grammar_ready",
    )

    def __init__(
        self,
        prompt_len: int,
        max_tokens: int,
        stop_after: int = 0,
        sink: Sink | None = None,
        index: int = 0,
        block_hashes: tuple[int, ...] = (),
        adapter: str = "",
    ) -> None:
        self.prompt_len = prompt_len
        self.max_tokens = max_tokens
        self.stop_after = stop_after
        self.sink = sink
        self.index = index
        self.block_hashes = block_hashes
        self.num_computed = 0
        self.num_output = 0
        self.num_blocks = 0
        self.cached_blocks: list[int] = []  # hashes of the cached blocks it holds (kvcache.py)
        self.num_hashed = 0  # leading prompt blocks already hit or registered
        self.num_cached_tokens = 0  # prompt tokens found in the prefix cache at its first admission
        self.num_external_tokens = 0  # of those, the ones a KV connector supplied (CPU tier, P/D prefill instance)
        self.num_preemptions = 0
        self.finish_reason: str | None = None
        self.arrival = 0.0  # the request reached the server (its HTTP request was read)
        self.ready = 0.0  # the API server handed it to the engine core: arrival + its wait for and time in the frontend
        self.first_scheduled: float | None = None
        self.first_token: float | None = None
        self.previous_token: float | None = None  # time of the token before the last one (inter-token latency)
        self.last_token: float | None = None
        self.finished_at: float | None = None
        self.adapter = adapter  # the LoRA adapter it runs with (lora.py), "" for the base model
        self.encoder_flops = 0.0  # the vision encoder's work on its images (vision.py), not yet charged to a step
        self.external_computed = 0  # prompt tokens whose KV another instance computed and sent (disagg.py)
        self.num_drafts = 0  # speculative decoding: draft tokens proposed for its next step (specdecode.py)
        self.step_ends: deque[int] | None = None  # speculative decoding: output length after each step not yet streamed
        self.priority = 0  # the request's priority field: lower first under the priority policy (priority.py)
        self.grammar = ""  # a structured output's schema text (grammar.py): compiled once, masked every step
        self.grammar_ready = 0.0  # when its grammar is compiled: it is not scheduled before

    # vLLM's timings of a sequence, in engine seconds: each is read once the engine has set the times it spans
    def ttft(self) -> float:
        return _between(self.arrival, self.first_token)

    def last_gap(self) -> float:
        """The inter-token latency before the last token."""
        return _between(self.previous_token, self.last_token)

    def e2e(self) -> float:
        return _between(self.arrival, self.finished_at)

    def queue_time(self) -> float:
        """In the engine core's waiting queue (vLLM's queue time starts when the engine core receives it)."""
        return _between(self.ready, self.first_scheduled)

    def prefill_time(self) -> float:
        return _between(self.first_scheduled, self.first_token)

    def decode_time(self) -> float:
        return _between(self.first_token, self.last_token)

    def inference_time(self) -> float:
        return _between(self.first_scheduled, self.last_token)

    def tpot(self) -> float:
        """Time per output token after the first (a sequence of more than one token)."""
        return self.decode_time() / (self.num_output - 1)

    def finished_reason(self) -> str:
        if self.finish_reason is None:
            raise ValueError("the sequence has not finished")
        return self.finish_reason


def _between(start: float | None, end: float | None) -> float:
    if start is None or end is None:
        raise ValueError("a sequence's time was read before the engine set it")
    return end - start
