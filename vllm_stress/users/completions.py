"""Locustfile: text completions (``/v1/completions``), streamed by default.

locust -f locustfiles/completions.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m
"""

from vllm_stress.users.base import LLMUser, sampling


class CompletionsUser(LLMUser):
    path = "/v1/completions"
    request_name = "completions"
    output_marker = b'"choices":[{"index":0,"text":"'

    def body(self, spec) -> dict:
        return sampling(self, spec) | {"prompt": spec.text}

    def is_output(self, choice: dict) -> bool:
        # vLLM's benchmark rule: every completions chunk with a choice carries output (its text may be "")
        return "text" in choice
