"""Locustfile: chat completions (``/v1/chat/completions``), streamed by default — the suite's main user.

    locust -f locustfiles/chat.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --results-dir results/chat
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository root, for `locustfiles.*`

from locustfiles.base import LLMUser, sampling  # noqa: E402


class ChatUser(LLMUser):
    path = "/v1/chat/completions"
    request_name = "chat"
    chat = True
    output_marker = b'"delta":{"content":"'  # vLLM's role chunk starts with "role", so it never matches

    def body(self, spec) -> dict:
        return sampling(self, spec) | {"messages": [{"role": "user", "content": spec.text}]}

    def is_output(self, choice: dict) -> bool:
        # vLLM's benchmark rule: text, reasoning or tool calls, or an empty content that is not the role chunk
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning") or delta.get("reasoning_content") or delta.get("tool_calls"):
            return True
        return delta.get("content") == "" and "role" not in delta
