"""vLLM's pooling APIs as the simulator serves them: ``POST /v1/embeddings`` (one embedding per input), ``/rerank``
and ``/v1/rerank`` (a query's documents by relevance) and ``/score`` (``text_1`` against ``text_2``). Each input, or
each query-document pair, is one prefill-only request on the engine (max_tokens 0: its prompt's cost and no decode),
answered with vLLM's bodies (its ``vllm/entrypoints/pooling`` protocol; docs/guides/endpoints.md)."""

from __future__ import annotations

import base64
import random
import struct
import time

from ..model.errors import ApiError
from ..model.tokenizer import Tokenizer
from .protocol import new_request_id

EMBEDDING_DIMENSIONS = 384  # the simulated embedding model's output size (a small sentence encoder's)
ENCODING_FORMATS = ("float", "base64")


def embedding_prompts(body: dict, tokenizer: Tokenizer) -> list[list[int]]:
    """The token ids of an embeddings request's inputs: ``input`` a string, a list of strings, a list of token ids
    or a list of such lists; special tokens added unless ``add_special_tokens`` is false (vLLM's default adds them)."""
    given = body.get("input")
    special = body.get("add_special_tokens", True) is not False
    inputs = [given] if isinstance(given, str) or _token_ids(given) else given
    if not isinstance(inputs, list) or not inputs:
        raise ApiError("body.input: a string, a list of strings or of token id lists is required", param="input")
    prompts = []
    for item in inputs:
        if isinstance(item, str):
            prompts.append(tokenizer.encode(item, special))
        elif _token_ids(item):
            prompts.append(list(item))
        else:
            raise ApiError(f"body.input: each input must be a string or token ids, got {item!r:.40}", param="input")
    if body.get("encoding_format", "float") not in ENCODING_FORMATS:
        raise ApiError(f"body.encoding_format: one of {', '.join(ENCODING_FORMATS)}", param="encoding_format")
    return prompts


def _token_ids(value: object) -> bool:
    return (
        isinstance(value, list) and bool(value) and all(isinstance(t, int) and not isinstance(t, bool) for t in value)
    )


def _texts(value: object, field: str) -> list[str]:
    """A field that holds one string or a non-empty list of strings, as a list."""
    texts = [value] if isinstance(value, str) else value
    if not isinstance(texts, list) or not texts or not all(isinstance(text, str) for text in texts):
        raise ApiError(f"body.{field}: a string or a non-empty list of strings is required", param=field)
    return texts


def pair_ids(tokenizer: Tokenizer, first: str, second: str) -> list[int]:
    """A cross-encoder's prompt for a pair: the first text with the special tokens, then the second without."""
    return tokenizer.encode(first) + tokenizer.encode(second, add_special_tokens=False)


def rerank_pairs(body: dict) -> tuple[str, list[str]]:
    """A rerank request's query and documents."""
    query = body.get("query")
    if not isinstance(query, str):
        raise ApiError("body.query: a string is required", param="query")
    return query, _texts(body.get("documents"), "documents")


def score_pairs(body: dict) -> list[tuple[str, str]]:
    """A score request's pairs: ``text_1`` against each ``text_2`` when it is one text, else pairwise (vLLM's
    rule: the lists must be as long)."""
    first, second = _texts(body.get("text_1"), "text_1"), _texts(body.get("text_2"), "text_2")
    if len(first) == 1:
        first = first * len(second)
    if len(first) != len(second):
        raise ApiError("text_1 and text_2 must be one text against many, or lists of the same length", param="text_1")
    return list(zip(first, second, strict=True))


def _rng(token_ids: list[int]) -> random.Random:
    return random.Random(hash(tuple(token_ids)))


def embedding(token_ids: list[int]) -> list[float]:
    """A unit vector the prompt's tokens determine (the same input, the same embedding)."""
    rng = _rng(token_ids)
    vector = [rng.gauss(0.0, 1.0) for _ in range(EMBEDDING_DIMENSIONS)]
    norm = sum(x * x for x in vector) ** 0.5 or 1.0
    return [x / norm for x in vector]


def relevance(token_ids: list[int]) -> float:
    """A pair's score in (0, 1), determined by its tokens."""
    return _rng(token_ids).random()


def usage(prompt_tokens: int) -> dict:
    """vLLM's UsageInfo of a pooling answer: prompt tokens only."""
    counts = {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens, "completion_tokens": 0}
    return counts | {"prompt_tokens_details": None, "completion_tokens_details": None}


def embeddings_response(model: str, prompts: list[list[int]], encoding_format: str = "float") -> dict:
    """vLLM's EmbeddingResponse: ``data[].embedding`` a list of floats, or base64 of little-endian float32s."""
    data = []
    for index, token_ids in enumerate(prompts):
        vector: list[float] | str = embedding(token_ids)
        if encoding_format == "base64":
            vector = base64.b64encode(struct.pack(f"<{len(vector)}f", *vector)).decode()
        data.append({"index": index, "object": "embedding", "embedding": vector})
    return {
        "id": new_request_id("embd"),
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": data,
        "usage": usage(sum(map(len, prompts))),
    }


def rerank_response(model: str, documents: list[str], prompts: list[list[int]], top_n: object) -> dict:
    """vLLM's RerankResponse: the documents by relevance, highest first, the first ``top_n`` (0 or none: all);
    the usage counts every pair."""
    scores = sorted(((relevance(ids), index) for index, ids in enumerate(prompts)), reverse=True)
    if isinstance(top_n, int) and top_n > 0:
        scores = scores[:top_n]
    results = [
        {"index": index, "document": {"text": documents[index], "multi_modal": None}, "relevance_score": score}
        for score, index in scores
    ]
    prompt_tokens = sum(map(len, prompts))
    return {
        "id": new_request_id("score"),  # vLLM 0.32 answers a rerank request from its score server: score-
        "model": model,
        "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens},
        "results": results,
    }


def score_response(model: str, prompts: list[list[int]]) -> dict:
    """vLLM's ScoreResponse: a score per pair, in the request's order."""
    return {
        "id": new_request_id("score"),
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": [{"index": index, "object": "score", "score": relevance(ids)} for index, ids in enumerate(prompts)],
        "usage": usage(sum(map(len, prompts))),
    }
