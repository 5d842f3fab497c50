"""Locustfile: Anthropic's Messages API (``/v1/messages``) (``vllm_stress.users.messages``).

locust -f locustfiles/messages.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.messages import MessagesUser

__all__ = ["MessagesUser"]
