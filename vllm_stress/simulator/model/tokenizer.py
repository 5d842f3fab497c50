"""A deterministic stand-in for a Hugging Face tokenizer and a Llama-3-style chat template
(docs/concepts/simulator.md, section 8)."""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence

from .sampling import WORDS
from .vision import ImageCost

TOKEN_PATTERN = re.compile(r"\w+|[^\w\s]")
VOCAB_SIZE = 128256
_HASHED_IDS = 128000
BOS_ID, START_HEADER_ID, END_HEADER_ID, EOT_ID = 128000, 128006, 128007, 128009
VISION_START_ID, IMAGE_PAD_ID, VISION_END_ID = (
    128002,
    128003,
    128004,
)  # Llama 3's reserved special tokens, named as Qwen-VL's
SPECIAL_TOKENS = {
    BOS_ID: "<|begin_of_text|>",
    VISION_START_ID: "<|vision_start|>",
    IMAGE_PAD_ID: "<|image_pad|>",
    VISION_END_ID: "<|vision_end|>",
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

    def chat_encode(
        self,
        messages: list[tuple[str, str]],
        add_generation_prompt: bool = True,
        images: Sequence[list[ImageCost]] = (),
        expand_images: bool = True,
    ) -> list[int]:
        """Token ids of ``messages`` (``(role, text)`` pairs) after the chat template; ``images``: each message's,
        after its text, as a Qwen-VL template puts them: <|vision_start|>, the image's tokens, <|vision_end|>. Not
        ``expand_images`` (vLLM's /tokenize): one <|image_pad|> placeholder per image, as its tokenizer sees it."""
        ids = [BOS_ID]
        for number, (role, text) in enumerate(messages):
            ids += [START_HEADER_ID, *self.encode(role, False), END_HEADER_ID, *self.encode(text, False)]
            for image in images[number] if number < len(images) else ():
                ids += [VISION_START_ID, *(image_ids(image) if expand_images else [IMAGE_PAD_ID]), VISION_END_ID]
            ids.append(EOT_ID)
        if add_generation_prompt:
            ids += [START_HEADER_ID, self.token_id("assistant"), END_HEADER_ID]
        return ids


def image_ids(image: ImageCost) -> list[int]:
    """The prompt token ids an image expands to: as many as its tokens, derived from its content (the same image
    gives the same ids, so it hits the prefix cache as vLLM's image hashes make it)."""
    return [(image.key + offset) % _HASHED_IDS for offset in range(image.tokens)]
