"""Locustfile: chat completions (``/v1/chat/completions``), streamed by default — the suite's main user.

locust -f locustfiles/chat.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --results-dir results/chat"""

from __future__ import annotations

from typing import Any

from vllm_stress.client.exchange import is_output_delta
from vllm_stress.client.images import message_content
from vllm_stress.client.prompts import RequestSpec
from vllm_stress.client.structured import chat_fields
from vllm_stress.client.video import fps_fields
from vllm_stress.users import completions, embeddings, rerank, score  # modules: Locust runs a file's User classes
from vllm_stress.users.base import LLMUser, sampling

# a mixed fleet: the users a chat user's traffic class names by its api= (docs/guides/traffic-classes.md)
CLASS_APIS = (completions.CompletionsUser, embeddings.EmbeddingsUser, rerank.RerankUser, score.ScoreUser)


class ChatUser(LLMUser):
    path = "/v1/chat/completions"
    request_name = "chat"
    chat = True
    apis = {user.request_name: user for user in CLASS_APIS}
    output_marker = b'"delta":{"content":"'  # vLLM's role chunk starts with "role", so it never matches
    takes_images = True  # --images
    takes_videos = True  # --videos
    takes_schemas = True  # --json-schema

    def body(self, spec: RequestSpec) -> dict[str, Any]:
        structured = chat_fields(spec.json_schema) if spec.json_schema else {}
        return (
            sampling(self, spec)
            | structured
            | fps_fields(spec.video_fps)
            | {"messages": [{"role": "user", "content": message_content(spec.text, spec.images, spec.videos)}]}
        )

    def is_output(self, choice: dict[str, Any]) -> bool:
        return is_output_delta(choice.get("delta") or {})
