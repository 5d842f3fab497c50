"""A deterministic stand-in for a Hugging Face tokenizer and a Llama-3-style chat template
(docs/concepts/simulator.md, section 8)."""

from __future__ import annotations

import re
import zlib

from .sampling import WORDS

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
VOCAB_SIZE = 128256
_HASHED_IDS = 128000
BOS_ID, START_HEADER_ID, END_HEADER_ID, EOT_ID = 128000, 128006, 128007, 128009
SPECIAL_TOKENS = {
    BOS_ID: "<|begin_of_text|>",
    START_HEADER_ID: "<|start_header_id|>",
    END_HEADER_ID: "<|end_header_id|>",
    EOT_ID: "<|eot_id|>",
}
_MEMO_LIMIT = 1_000_000


class Tokenizer:
    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._texts: dict[int, str] = dict(SPECIAL_TOKENS)
        for word in WORDS:
            self.token_id(word)

    def token_id(self, token: str) -> int:
        token_id = self._ids.get(token)
        if token_id is None:
            token_id = zlib.crc32(token.encode()) % _HASHED_IDS
            if len(self._ids) < _MEMO_LIMIT:
                self._ids[token] = token_id
                self._texts[token_id] = token
        return token_id

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids = [self.token_id(token) for token in TOKEN_PATTERN.findall(text)]
        return [BOS_ID, *ids] if add_special_tokens else ids

    def token_text(self, token_id: int) -> str:
        if token_id not in self._texts:
            raise ValueError(f"Token id {token_id} is out of vocabulary")
        return self._texts[token_id]

    def decode(self, token_ids: list[int]) -> str:
        pieces, previous = [], None
        for token_id in token_ids:
            text = self.token_text(token_id)
            after_text = previous is not None and previous not in SPECIAL_TOKENS and token_id not in SPECIAL_TOKENS
            pieces.append(" " + text if after_text and (text[0].isalnum() or text[0] == "_") else text)
            previous = token_id
        return "".join(pieces)

    def chat_encode(self, messages: list[tuple[str, str]], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of ``messages`` (``(role, text)`` pairs) after the chat template."""
        ids = [BOS_ID]
        for role, text in messages:
            ids += [START_HEADER_ID, *self.encode(role, False), END_HEADER_ID, *self.encode(text, False), EOT_ID]
        if add_generation_prompt:
            ids += [START_HEADER_ID, self.token_id("assistant"), END_HEADER_ID]
        return ids
