"""Locustfile: vLLM's speech-to-text APIs (``/v1/audio/transcriptions``, ``/v1/audio/translations``; --audio-task),
each request a multipart form with --audio-seconds of synthetic WAV, streamed by default and then timed like chat
(TTFT, ITL, TPOT over the final usage chunk's tokens); not streamed (--no-stream), e2e only.

A transcript is as long as the model makes it: nothing forces the output, so its length is not checked against a
target (as the Messages user's); the rows' audio_s is the audio sent (docs/guides/endpoints.md).

locust -f locustfiles/audio.py -H http://127.0.0.1:8000 --headless -u 10 -t 1m --audio-seconds 10"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

from vllm_stress.client.adapters import model_field
from vllm_stress.client.audio import TASK_PATHS, form_body, read_transcript, request_fields, wav_bytes
from vllm_stress.client.exchange import is_output_delta
from vllm_stress.users.base import LLMUser
from vllm_stress.users.target import TARGETS

if TYPE_CHECKING:
    from locust.env import Environment

    from vllm_stress.client.exchange import Exchange
    from vllm_stress.client.prompts import RequestSpec

wav = functools.cache(wav_bytes)  # every user of a process sends the same audio: made once


class AudioUser(LLMUser):
    """A closed-loop speech-to-text client: the same audio every request (the workload's prompts go unused), its
    task's path and name taken from --audio-task."""

    path = TASK_PATHS["transcription"]
    request_name = "transcription"
    forces_output = False  # vLLM's speech-to-text request has no ignore_eos: the transcript's length is the model's
    takes_canaries = False  # a canary is a question to answer: not audio

    def __init__(self, environment: Environment) -> None:
        options = TARGETS[environment].options
        self.request_name, self.path = options.audio_task, TASK_PATHS[options.audio_task]
        super().__init__(environment)
        self.seconds: float = options.audio_seconds
        self.audio = wav(self.seconds)

    def send(self, spec: RequestSpec, exchange: Exchange) -> None:
        exchange.audio_s = self.seconds
        exchange.target_prompt_tokens, exchange.max_tokens = None, 0  # no text prompt, no output length asked
        super().send(spec, exchange)

    def encode(self, spec: RequestSpec, exchange: Exchange) -> tuple[bytes, str]:
        model = model_field(exchange.adapter).get("model", self.target.model)
        return form_body(request_fields(model, self.stream, self.temperature), self.audio)

    def is_output(self, choice: dict[str, Any]) -> bool:
        return is_output_delta(choice.get("delta") or {})

    def read_json(self, response: dict[str, Any], exchange: Exchange) -> None:
        read_transcript(response, exchange)
