"""Locustfile: vLLM's pooling APIs, not streamed, timed end to end: embeddings (``/v1/embeddings``, a batch of
--embedding-inputs prompts per request), rerank (``/rerank``) and score (``/score``), a query against
--rerank-documents documents. Each prompt is sized like a completions prompt (--input-tokens, with /tokenize);
an embeddings row's prompt tokens are checked against the batch's (docs/guides/endpoints.md).

locust -f locustfiles/embeddings.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm_stress.client.classes import request_fields
from vllm_stress.client.pooling import (
    embeddings_body,
    read_embeddings,
    read_rerank,
    read_score,
    rerank_body,
    score_body,
)
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.users.base import LLMUser

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.client.exchange import Exchange


class PoolingUser(LLMUser):
    """A pooling request per task: ``prompts`` prompts drawn from the workload, sent whole, read whole. Nothing is
    generated: its row's target output is 0 and it has no TTFT."""

    abstract = True
    chat = False  # vLLM tokenizes pooling inputs as plain prompts, special tokens added: /tokenize counts them so
    forces_output = False  # no output to force or check
    takes_canaries = False  # a canary is a question to answer: not a pooling request
    cancellable = False  # --cancel-share cuts streams; a pooling answer comes whole
    has_query = False  # rerank and score: a query before the documents, one more prompt
    batch: list[RequestSpec]  # the prompts of the request being sent (send, then body)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.stream = False

    def inputs(self) -> int:
        """The inputs (or documents) each request carries."""
        raise NotImplementedError

    def send(self, spec: RequestSpec, exchange: Exchange) -> None:
        assert self.workload is not None  # run_request stops a user without one
        more = self.inputs() - 1 + int(self.has_query)
        self.batch = [spec, *(self.workload.next_request() for _ in range(more))]
        exchange.inputs, exchange.max_tokens = self.inputs(), 0
        exchange.target_prompt_tokens = self.target_tokens()
        super().send(spec, exchange)

    def target_tokens(self) -> int | None:
        """The prompt tokens the request is built to have; None when the server's count cannot be known."""
        return None

    def texts(self) -> list[str]:
        return [spec.text for spec in self.batch]

    def fields(self) -> dict[str, Any]:
        return request_fields(self.traffic_class)


class EmbeddingsUser(PoolingUser):
    path = "/v1/embeddings"
    request_name = "embeddings"

    def inputs(self) -> int:
        return int(self.target.options.embedding_inputs)

    def target_tokens(self) -> int | None:
        """The inputs' sizes summed: vLLM embeds each as /tokenize counts it."""
        targets = [spec.target_prompt_tokens for spec in self.batch]
        return None if None in targets else sum(t for t in targets if t is not None)

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        return embeddings_body(self.texts(), self.target.model, self.target.options.embedding_format) | self.fields()

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_embeddings(response, exchange)


class RerankUser(PoolingUser):
    """The query and each document make one cross-encoder prompt, whose special tokens depend on the model: the
    row's prompt tokens are the server's, not checked."""

    path = "/rerank"
    request_name = "rerank"
    has_query = True

    def inputs(self) -> int:
        return int(self.target.options.rerank_documents)

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        query, *documents = self.texts()
        return rerank_body(query, documents, self.target.model) | self.fields()

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_rerank(response, exchange)


class ScoreUser(RerankUser):
    path = "/score"
    request_name = "score"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        query, *documents = self.texts()
        return score_body(query, documents, self.target.model) | self.fields()

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_score(response, exchange)
