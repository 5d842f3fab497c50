"""Locustfile: vLLM's score API (``/score``): ``text_1`` a query, ``text_2`` its --rerank-documents documents, a
score per pair, not streamed; prompt tokens as rerank's, the server's (docs/guides/endpoints.md).

locust -f locustfiles/score.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --rerank-documents 16"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vllm_stress.client.pooling import read_score, score_body
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.users.pooling import PoolingUser

if TYPE_CHECKING:
    from vllm_stress.client.exchange import Exchange


class ScoreUser(PoolingUser):
    path = "/score"
    request_name = "score"
    has_query = True
    inputs_option = "rerank_documents"

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        query, *documents = self.texts()
        return score_body(query, documents, self.target.model) | self.fields()

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_score(response, exchange)
