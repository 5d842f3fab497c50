"""Locustfile: streamed chat completions (``/v1/chat/completions``), the suite's main user (``vllm_stress.users.chat``).

locust -f locustfiles/chat.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.chat import ChatUser

__all__ = ["ChatUser"]
