"""A multi-turn conversation's state, its pieces' token counts and the think time between its turns."""

from __future__ import annotations

import random
from collections.abc import Iterable

from vllm_stress.client.exchange import Exchange
from vllm_stress.client.prompts import Tokenizer
from vllm_stress.client.sessionmodel import RecordedSession


class TurnSizer:
    """Token counts of the pieces a turn adds to a conversation, all measured before the run with the server's
    ``/tokenize`` (chat template): the template around a message and between an answer and the next message, and
    each human turn of the dataset's conversations. Raises when ``/tokenize`` fails."""

    def __init__(self, tokenizer: Tokenizer, texts: Iterable[str] = ()) -> None:
        self.empty = tokenizer.count_messages([user_message("")])
        # the template between an answer's text and the next user message's text, generation prompt included
        self.joint = tokenizer.count_messages([user_message(""), assistant_message(""), user_message("")]) - self.empty
        self.messages = {text: tokenizer.count_messages([user_message(text)]) - self.empty for text in set(texts)}

    def message(self, text: str) -> int | None:
        """Tokens of a user message's text, if it was measured."""
        return self.messages.get(text)

    def history(self, answered: Exchange) -> int | None:
        """The prompt tokens of the turn after ``answered`` without its new message, from ``answered``'s usage: its
        prompt, its answer's tokens and the template between the answer and the next message. The history carries
        the answer's text only: not the reasoning tokens, nor a final EOS (finish_reason "stop"), which has no text.
        None when the usage does not say."""
        prompt, completion = answered.prompt_tokens, answered.completion_tokens
        reasoning = answered.reasoning_tokens
        if prompt is None or completion is None or (reasoning is None and answered.reasoning_chunks):
            return None
        return prompt + completion - (reasoning or 0) - (answered.finish_reason == "stop") + self.joint


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

    def __init__(
        self,
        session_id: str,
        turns: int,
        texts: list[str] | None,
        recorded: RecordedSession | None = None,
        salt: str = "",
    ) -> None:
        self.session_id = session_id
        self.turns = turns
        self.texts = texts  # the human turns of a dataset conversation, or None: random words
        self.recorded = recorded  # --session-trace: the recorded session it replays, its turns' prompts and gaps
        self.salt = salt  # --session-trace: its block words' salt (its deck's, and its pass through it)
        self.messages: list[dict] = []
        self.turn = 0  # the turn in flight or last sent
        self.next_target: int | None = None  # prompt tokens the next turn must have, from the history

    @property
    def over(self) -> bool:
        return self.turn >= self.turns
