"""Locustfile: vLLM's rerank API (``/rerank``) (``vllm_stress.users.rerank``).

locust -f locustfiles/rerank.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.rerank import RerankUser

__all__ = ["RerankUser"]
