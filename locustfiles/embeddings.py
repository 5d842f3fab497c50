"""Locustfile: vLLM's embeddings API (``/v1/embeddings``) (``vllm_stress.users.embeddings``).

locust -f locustfiles/embeddings.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.embeddings import EmbeddingsUser

__all__ = ["EmbeddingsUser"]
