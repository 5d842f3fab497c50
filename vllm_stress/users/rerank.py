"""Locustfile: vLLM's rerank API (``/rerank``, Jina's and Cohere's shape): a query and --rerank-documents documents
per request, not streamed. The query and each document make one cross-encoder prompt whose special tokens are the
model's, so the row's prompt tokens are the server's, not checked (docs/guides/endpoints.md).

locust -f locustfiles/rerank.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --rerank-documents 16"""

from __future__ import annotations

from vllm_stress.client.pooling import read_rerank, rerank_body
from vllm_stress.users.pooling import QueryUser


class RerankUser(QueryUser):
    path = "/rerank"
    request_name = "rerank"
    build = staticmethod(rerank_body)
    read = staticmethod(read_rerank)
