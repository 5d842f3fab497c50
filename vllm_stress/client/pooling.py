"""vLLM's pooling APIs on the client's side: the bodies of an embeddings, a rerank and a score request, and the reading
of their answers (its ``vllm/entrypoints/pooling`` protocol): the usage's prompt tokens onto the exchange, and a
failure when the answer does not hold one result per input sent (docs/guides/endpoints.md)."""

from __future__ import annotations

from typing import Any

from vllm_stress.client.exchange import Exchange, error_event
from vllm_stress.core.failures import StreamError

ENCODING_FORMATS = ("float", "base64")  # vLLM's encoding_format of an embedding: a list of floats or base64 float32s
INCOMPLETE = "IncompleteAnswer"  # the failure of an answer without a result for every input sent


def embeddings_body(texts: list[str], model: str, encoding_format: str) -> dict[str, Any]:
    """An embeddings request of ``texts`` (vLLM adds the model's special tokens to each, as /tokenize counts them)."""
    return {"input": texts, "encoding_format": encoding_format} | ({"model": model} if model else {})


def rerank_body(query: str, documents: list[str], model: str) -> dict[str, Any]:
    """A rerank request: every document scored against the query (no top_n: all come back)."""
    return {"query": query, "documents": documents} | ({"model": model} if model else {})


def score_body(query: str, documents: list[str], model: str) -> dict[str, Any]:
    """A score request: ``text_1`` the query, scored against each of ``text_2``."""
    return {"text_1": query, "text_2": documents} | ({"model": model} if model else {})


def read_usage(response: dict[str, Any], exchange: Exchange) -> None:
    """A pooling answer's usage: its prompt tokens (a pooling request generates nothing: 0 output tokens; its answer
    has no finish reason, nor has its row)."""
    if "error" in response:
        raise error_event(response)
    usage = response.get("usage") or {}
    exchange.usage({"prompt_tokens": usage.get("prompt_tokens"), "completion_tokens": 0})


def read_embeddings(response: dict[str, Any], exchange: Exchange) -> None:
    """An embeddings answer: an embedding (floats or base64) for each input, in the inputs' order."""
    read_usage(response, exchange)
    data = response.get("data") or []
    indexes = [item.get("index") for item in data if isinstance(item, dict) and item.get("embedding")]
    _check_all(indexes, exchange, "embeddings")


def read_rerank(response: dict[str, Any], exchange: Exchange) -> None:
    """A rerank answer: a relevance score for each document (by its index)."""
    read_usage(response, exchange)
    results = response.get("results") or []
    scored = [item.get("index") for item in results if isinstance(item.get("relevance_score"), int | float)]
    _check_all(scored, exchange, "relevance scores")


def read_score(response: dict[str, Any], exchange: Exchange) -> None:
    """A score answer: a score for each pair."""
    read_usage(response, exchange)
    data = response.get("data") or []
    _check_all([item.get("index") for item in data if isinstance(item.get("score"), int | float)], exchange, "scores")


def _check_all(indexes: list[Any], exchange: Exchange, what: str) -> None:
    """The answer's result indexes must be those of the inputs sent, each once."""
    numbers = [index for index in indexes if isinstance(index, int)]
    if len(numbers) != len(indexes) or sorted(numbers) != list(range(exchange.inputs or 0)):
        raise StreamError(INCOMPLETE, f"{len(indexes)} {what} for {exchange.inputs} inputs")
