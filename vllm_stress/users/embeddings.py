"""Locustfile: vLLM's embeddings API (``/v1/embeddings``), a batch of --embedding-inputs prompts per request, not
streamed; the row's prompt tokens are checked against the batch's, as /tokenize sized each (docs/guides/endpoints.md).

locust -f locustfiles/embeddings.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --embedding-inputs 8"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm_stress.client.pooling import embeddings_body, read_embeddings
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.users.pooling import PoolingUser

if TYPE_CHECKING:
    from vllm_stress.client.exchange import Exchange


class EmbeddingsUser(PoolingUser):
    path = "/v1/embeddings"
    request_name = "embeddings"
    inputs_option = "embedding_inputs"

    def target_tokens(self) -> int | None:
        """The inputs' sizes summed: vLLM embeds each as /tokenize counts it."""
        targets = [spec.target_prompt_tokens for spec in self.batch]
        return None if None in targets else sum(t for t in targets if t is not None)

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        return embeddings_body(self.texts(), self.target.model, self.target.options.embedding_format) | self.fields()

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_embeddings(response, exchange)
