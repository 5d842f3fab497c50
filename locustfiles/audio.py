"""Locustfile: vLLM's speech-to-text APIs (``/v1/audio/transcriptions``, ``/v1/audio/translations``)
(``vllm_stress.users.audio``).

locust -f locustfiles/audio.py -H http://127.0.0.1:8000 --audio-seconds 10
"""

from vllm_stress.users.audio import AudioUser

__all__ = ["AudioUser"]
