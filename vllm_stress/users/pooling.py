"""What the users of vLLM's pooling APIs share (embeddings.py, rerank.py, score.py): a request of several prompts
drawn from the workload, each sized like a completions prompt (--input-tokens, with /tokenize), sent whole and read
whole, timed end to end (docs/guides/endpoints.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vllm_stress.client.classes import request_fields
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.users.base import LLMUser

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.client.exchange import Exchange


class PoolingUser(LLMUser):
    """A pooling request per task: its inputs (after a query, for rerank and score) drawn from the workload, sent
    whole, read whole. Nothing is generated: its row's target output is 0 and it has no TTFT."""

    abstract = True
    chat = False  # vLLM tokenizes pooling inputs as plain prompts, special tokens added: /tokenize counts them so
    forces_output = False  # no output to force or check
    takes_canaries = False  # a canary is a question to answer: not a pooling request
    cancellable = False  # --cancel-share cuts streams; a pooling answer comes whole
    has_query = False  # rerank and score: a query before the documents, one more prompt
    inputs_option = ""  # the option that says how many inputs (or documents) a request carries
    batch: list[RequestSpec]  # the prompts of the request being sent (send, then body)

    def __init__(self, environment: Environment) -> None:
        super().__init__(environment)
        self.stream = False

    def inputs(self) -> int:
        """The inputs (or documents) each request carries."""
        return int(getattr(self.target.options, self.inputs_option))

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


class QueryUser(PoolingUser):
    """Rerank and score: a query and --rerank-documents documents, each scored against it; ``build`` makes the
    request's body of them and ``read`` checks the answer (vllm_stress.client.pooling)."""

    abstract = True
    has_query = True
    inputs_option = "rerank_documents"
    build: Callable[[str, list[str], str], dict[str, Any]]
    read: Callable[[dict[str, Any], Exchange], None]

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        query, *documents = self.texts()
        return self.build(query, documents, self.target.model) | self.fields()

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        self.read(response, exchange)
