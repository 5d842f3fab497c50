"""Locustfile: OpenAI's Responses API (``/v1/responses``) (``vllm_stress.users.responses``).

locust -f locustfiles/responses.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.responses import ResponsesUser

__all__ = ["ResponsesUser"]
