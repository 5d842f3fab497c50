"""Locustfile: vLLM's score API (``/score``): ``text_1`` a query, ``text_2`` its --rerank-documents documents, a
score per pair, not streamed; prompt tokens as rerank's, the server's (docs/guides/endpoints.md).

locust -f locustfiles/score.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --rerank-documents 16"""

from __future__ import annotations

from vllm_stress.client.pooling import read_score, score_body
from vllm_stress.users.pooling import QueryUser


class ScoreUser(QueryUser):
    path = "/score"
    request_name = "score"
    build = staticmethod(score_body)
    read = staticmethod(read_score)
