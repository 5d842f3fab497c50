"""Correctness canaries (--canary-share): which of a level's requests are fixed prompts, and which prompt each is.

A canary is a question of a graded set (``scenarios/data/*.jsonl``, the parallel command's, or a user file) sent at
temperature 0 with a fixed seed. Each process asks, at each level, the set's first ``--canary-min`` questions in
turn, so the lowest level has answered every prompt a higher level asks (docs/concepts/metrics.md)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from vllm_stress.core.questions import MAX_TOKENS, Question, load_questions, prompt

DEFAULT_CANARY_SHARE = 0.02  # of each level's requests, by default: a few per cent (0: none)
DEFAULT_CANARY_MIN = 5  # canaries per level and process, whatever the share (with canaries on)
# what makes the same prompt get the same answer: greedy, with the same seed, on every API
CANARY_SAMPLING = {"temperature": 0.0, "seed": 1234}
DEFAULT_CANARY_SET = Path(__file__).resolve().parents[1] / "scenarios" / "data" / "synthetic-mc.jsonl"


@dataclass(frozen=True)
class Canary:
    """One canary request to send: the question's id, its prompt, expected answer and output budget."""

    id: str
    text: str
    gold: str
    max_tokens: int


class Canaries:
    """Counts each level's requests and says which are canaries: the first ``minimum`` of a level, then one in every
    ``1 / share`` (the share rounded up to whole requests as the level goes on)."""

    def __init__(self, questions: list[Question], share: float, minimum: int) -> None:
        self.canaries = [Canary(q.id, prompt(q), q.gold, MAX_TOKENS[q.kind]) for q in questions]
        self.share = share
        self.minimum = minimum
        # the prompts asked in turn: the first ``minimum`` of the set, so that every level, the lowest included,
        # answers each of them and each answer has the lowest level's to be compared with
        self.pool = min(minimum, len(self.canaries)) if minimum > 0 else len(self.canaries)
        self.requests: Counter[int] = Counter()  # level -> requests taken at it
        self.asked: Counter[int] = Counter()  # level -> canaries sent at it

    def next(self, level: int) -> Canary | None:
        """The canary the next request at ``level`` is, or None for an ordinary request."""
        self.requests[level] += 1
        asked = self.asked[level]
        if asked >= self.minimum and asked >= math.ceil(self.requests[level] * self.share):
            return None
        self.asked[level] += 1
        return self.canaries[asked % self.pool]


def load_canaries(path: str, share: float, minimum: int) -> Canaries | None:
    """The canaries of a JSONL set (``path``, or the shipped multiple-choice set when empty); None (no canaries) when
    ``share`` is 0. Raises core.questions.DatasetError."""
    if share <= 0:
        return None
    return Canaries(load_questions(Path(path) if path else DEFAULT_CANARY_SET), share, minimum)
