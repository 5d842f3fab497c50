"""A multi-turn conversation's state, its pieces' token counts and the think time between its turns."""

from __future__ import annotations

import logging
import random

import requests

from vllm_stress.client.prompts import Tokenizer

log = logging.getLogger(__name__)


class TurnSizer:
    """Token counts of the pieces a turn adds to a conversation, from the server's ``/tokenize`` (chat template).
    Measuring the constants raises when ``/tokenize`` fails; a later piece that cannot be measured is None."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self.empty = tokenizer.count_messages([user_message("")])
        # the template between an answer's text and the next user message's text, generation prompt included
        self.joint = tokenizer.count_messages([user_message(""), assistant_message(""), user_message("")]) - self.empty

    def count(self, messages: list[dict]) -> int | None:
        try:
            return self.tokenizer.count_messages(messages)
        except (requests.RequestException, ValueError, KeyError) as e:
            log.warning("/tokenize failed mid-run (%s): this session turn is not length-checked", e)
            return None

    def message(self, text: str) -> int | None:
        """Tokens of a user message's text."""
        count = self.count([user_message(text)])
        return None if count is None else count - self.empty

    def answer(self, text: str) -> int | None:
        """Tokens of an answer's text, read back inside a conversation."""
        count = self.count([user_message(""), assistant_message(text), user_message("")])
        return None if count is None else count - self.empty - self.joint


def user_message(text: str) -> dict:
    return {"role": "user", "content": text}


def assistant_message(text: str) -> dict:
    return {"role": "assistant", "content": text}


def think_time(rng: random.Random, mean: float, dist: str) -> float:
    """Seconds to think before the next turn (``--think-dist``)."""
    if mean <= 0 or dist == "constant":
        return max(mean, 0.0)
    if dist == "exponential":
        return rng.expovariate(1 / mean)
    return rng.uniform(0, 2 * mean)


class Conversation:
    """One session: its messages so far and what its next turn sends."""

    def __init__(self, session_id: str, turns: int, texts: list[str] | None) -> None:
        self.session_id = session_id
        self.turns = turns
        self.texts = texts  # the human turns of a dataset conversation, or None: random words
        self.messages: list[dict] = []
        self.turn = 0  # the turn in flight or last sent
        self.next_target: int | None = None  # prompt tokens the next turn must have, from the history

    @property
    def over(self) -> bool:
        return self.turn >= self.turns
