"""Locustfile: multi-turn chat sessions, one conversation per user at a time (``vllm_stress.users.session``).

locust -f locustfiles/session.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.session import ChatSessionUser

__all__ = ["ChatSessionUser"]
