"""Locustfile: text completions (``/v1/completions``) (``vllm_stress.users.completions``).

locust -f locustfiles/completions.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.completions import CompletionsUser

__all__ = ["CompletionsUser"]
