"""Locustfile: vLLM's rerank API (``/rerank``, Jina's and Cohere's shape): a query and --rerank-documents documents
per request, not streamed. The query and each document make one cross-encoder prompt whose special tokens are the
model's, so the row's prompt tokens are the server's, not checked (docs/guides/endpoints.md).

locust -f locustfiles/rerank.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --rerank-documents 16"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm_stress.client.pooling import read_rerank, rerank_body
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.users.pooling import PoolingUser

if TYPE_CHECKING:
    from vllm_stress.client.exchange import Exchange


class RerankUser(PoolingUser):
    path = "/rerank"
    request_name = "rerank"
    has_query = True
    inputs_option = "rerank_documents"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        query, *documents = self.texts()
        return rerank_body(query, documents, self.target.model) | self.fields()

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_rerank(response, exchange)
