"""Locustfile: chat completions through the official ``openai`` SDK (``vllm_stress.users.sdk``).

locust -f locustfiles/sdk.py -H http://127.0.0.1:8000
"""

from vllm_stress.users.sdk import SdkChatUser

__all__ = ["SdkChatUser"]
