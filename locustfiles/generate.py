"""Locustfile: the legacy ``/generate`` API of vLLM's old demo server (``vllm_stress.users.generate``).

locust -f locustfiles/generate.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.generate import GenerateUser

__all__ = ["GenerateUser"]
