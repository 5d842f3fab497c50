"""Speculative decoding in the simulated engine: after each step a decoding sequence proposes k draft tokens, the
next step verifies them with the target model, and the leading accepted drafts plus one sampled token (the bonus)
are its output, streamed as one chunk. vLLM's counters of it (``vllm/v1/spec_decode/metrics.py``) are exported.

- Acceptance: draft ``i`` is accepted with probability ``alpha[i]`` once drafts ``0 .. i-1`` were, so the tokens of a
  verifying step are ``1 + a`` with ``a`` the leading accepted drafts: ``1 + α + α² + … + α^k`` on average for a
  constant ``α`` (the model of Leviathan et al., "Fast Inference from Transformers via Speculative Decoding", 2023).
- Drafts per batch size (optional): vLLM's dynamic speculative decoding (``num_speculative_tokens_per_batch_size``
  in ``vllm/config/speculative.py``, looked up by the step's scheduled requests in
  ``vllm/v1/core/sched/scheduler.py``) proposes fewer drafts as the batch grows, so the accepted length per step
  falls with it.
- The drafter's cost: a share of the target's step time per draft token (an EAGLE head or an MTP layer runs once per
  draft over the whole batch after the target's forward pass).
"""

from __future__ import annotations

import argparse
import random
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily

from ..model.profiles import Profile

if TYPE_CHECKING:  # the engine imports this module
    from .sequence import Sequence

# CLI flag -> profile field (python -m simulator --spec-tokens 3 ...)
SPEC_FLAGS = ("spec_tokens", "spec_acceptance", "spec_draft_cost", "spec_tokens_per_batch")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The simulator's speculative-decoding flags (each overrides its profile field)."""
    parser.add_argument(
        "--spec-tokens",
        type=int,
        metavar="K",
        help="speculative decoding: K drafts per step (default 0: off)",
    )
    parser.add_argument(
        "--spec-acceptance",
        metavar="A[,A...]",
        help="chance a draft is accepted after the ones before it, per position (the last repeats)",
    )
    parser.add_argument(
        "--spec-draft-cost",
        type=float,
        metavar="F",
        help="the drafter's time per draft, as a share of the step",
    )
    parser.add_argument(
        "--spec-tokens-per-batch",
        metavar="LO-HI:K,...",
        help="drafts by batch size, as vLLM's num_speculative_tokens_per_batch_size (default: K)",
    )


def parse_acceptance(text: str) -> tuple[float, ...]:
    """'0.85,0.7' -> (0.85, 0.7); ValueError unless every value is a chance in [0, 1]."""
    values = tuple(float(part) for part in text.split(",") if part.strip())
    if not values or not all(0.0 <= value <= 1.0 for value in values):
        raise ValueError(f"--spec-acceptance must be chances in [0, 1], got {text!r}")
    return values


def parse_schedule(text: str, max_tokens: int) -> list[tuple[int, int, int]]:
    """'1-16:3,17-64:1' -> [(1, 16, 3), (17, 64, 1)]: inclusive batch-size ranges from 1, ascending, without gaps
    (vLLM's rule), each with at most ``max_tokens`` drafts."""
    schedule = []
    for part in filter(str.strip, text.split(",")):
        sizes, _, count = part.partition(":")
        first, _, last = sizes.partition("-")
        schedule.append((int(first), int(last or first), int(count)))
    expected = 1
    for low, high, tokens in schedule:
        if low != expected or high < low or not 0 <= tokens <= max_tokens:
            raise ValueError(
                f"--spec-tokens-per-batch: ranges must run on from 1 with 0..{max_tokens} drafts: {text!r}"
            )
        expected = high + 1
    return schedule


def mean_accepted_length(alpha: tuple[float, ...], k: int) -> float:
    """Expected tokens of a verifying step with ``k`` drafts: 1 + Σ_i Π_{j<=i} α_j (the bonus token included)."""
    total, reach = 1.0, 1.0
    for position in range(k):
        reach *= alpha[min(position, len(alpha) - 1)]
        total += reach
    return total


class SpecDecode:
    """The drafts, their verification and vLLM's spec-decode counters of one engine."""

    def __init__(self, profile: Profile, seed: int = 0) -> None:
        if profile.spec_tokens < 1:
            raise ValueError("speculative decoding needs spec_tokens >= 1")
        self.k = profile.spec_tokens
        self.alpha = parse_acceptance(profile.spec_acceptance)
        self.draft_cost = profile.spec_draft_cost
        schedule = parse_schedule(profile.spec_tokens_per_batch, self.k)
        self.by_batch = [tokens for low, high, tokens in schedule for _ in range(low, high + 1)]
        self._rng = random.Random(seed ^ 0x5BEC)
        self.num_drafts = 0  # verifications (one per sequence and step that had drafts)
        self.num_draft_tokens = 0
        self.num_accepted_tokens = 0
        self.accepted_per_pos = [0] * self.k

    def drafts(self, batch: int) -> int:
        """Drafts each sequence proposes after a step that scheduled ``batch`` sequences."""
        return self.by_batch[min(batch, len(self.by_batch)) - 1] if self.by_batch else self.k

    def step_factor(self, batch: int) -> float:
        """The step's time with its drafter over the target's alone."""
        return 1.0 + self.draft_cost * self.drafts(batch)

    def verify(self, drafts: int) -> int:
        """Verify ``drafts`` draft tokens of one sequence: the leading accepted ones, counted as vLLM does."""
        accepted = 0
        while accepted < drafts and self._rng.random() < self.alpha[min(accepted, len(self.alpha) - 1)]:
            self.accepted_per_pos[accepted] += 1
            accepted += 1
        self.num_drafts += 1
        self.num_draft_tokens += drafts
        self.num_accepted_tokens += accepted
        return accepted

    def advance(self, seq: Sequence, drafts: int, batch: int) -> int:
        """The tokens ``seq`` gains from a step that computed its last token and ``drafts`` draft tokens (0: a prefill
        step) in a batch of ``batch`` sequences: the bonus token and the accepted drafts, cut at max_tokens or its EOS
        as vLLM's check_stop cuts them token by token. The rejected drafts' KV is dropped, and the drafts it proposes
        for its next step are set."""
        accepted = self.verify(drafts) if drafts > 0 else 0
        seq.num_computed -= max(drafts, 0) - accepted
        seq.num_drafts = self.drafts(batch)
        new = min(1 + accepted, seq.max_tokens - seq.num_output)
        new = min(new, seq.stop_after - seq.num_output) if seq.stop_after > seq.num_output else new
        if seq.step_ends is None:
            seq.step_ends = deque()
        seq.step_ends.append(seq.num_output + new)
        return new

    def families(self, labels: list[str]) -> Iterator[CounterMetricFamily]:
        """vLLM's spec-decode counters (names, help and labels of ``SpecDecodingProm``)."""
        for name, documentation, value in (
            ("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", self.num_drafts),
            ("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", self.num_draft_tokens),
            ("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", self.num_accepted_tokens),
        ):
            family = CounterMetricFamily(name, documentation, labels=["model_name", "engine"])
            family.add_metric(labels, value)
            yield family
        per_pos = CounterMetricFamily(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            labels=["model_name", "engine", "position"],
        )
        for position, value in enumerate(self.accepted_per_pos):
            per_pos.add_metric([*labels, str(position)], value)
        yield per_pos


def spec_decode(profile: Profile, seed: int = 0) -> SpecDecode | None:
    """The engine's speculative decoding, or None when the profile has none (spec_tokens 0)."""
    return SpecDecode(profile, seed) if profile.spec_tokens else None


def chunk_end(ends: deque[int], position: int, available: int, least: int) -> int:
    """Where the chunk that streams a sequence's tokens from ``position`` ends: at the first of its step ``ends`` at
    least ``least`` tokens on (vLLM streams a step's tokens together, and with stream_interval N waits for N),
    ``available`` at most (the tokens published so far). Passed ends are dropped."""
    while ends and ends[0] < position + least:
        ends.popleft()
    return min(ends[0], available) if ends else available
