"""vLLM's speech-to-text APIs on the client's side (``/v1/audio/transcriptions`` and ``/v1/audio/translations``,
OpenAI's multipart/form-data requests): the synthetic WAV a request sends, the form it goes in, and the reading of a
whole answer (docs/guides/endpoints.md, "Audio: transcription and translation")."""

from __future__ import annotations

import io
import math
import wave
from typing import Any

from vllm_stress.client.exchange import Exchange, error_event

TASK_PATHS = {"transcription": "/v1/audio/transcriptions", "translation": "/v1/audio/translations"}
SAMPLE_RATE = 16_000  # Hz: Whisper's own rate, so a server resamples nothing
SAMPLE_BYTES = 2  # 16-bit PCM
MAX_FILE_BYTES = 25 * 1024**2  # vLLM refuses a bigger file (VLLM_MAX_AUDIO_CLIP_FILESIZE_MB, default 25)
TONE_HZ = 440.0  # the tone the audio holds, under a little deterministic noise
BOUNDARY = "vllm-stress-audio-form"  # the form's part boundary: no field value or WAV header holds it


def max_seconds() -> float:
    """The longest audio whose WAV (44-byte header) stays within vLLM's file-size limit."""
    return (MAX_FILE_BYTES - 44) / (SAMPLE_RATE * SAMPLE_BYTES)


def wav_bytes(seconds: float) -> bytes:
    """``seconds`` of 16 kHz mono 16-bit PCM in a WAV file: a 440 Hz tone with a little noise from a fixed
    linear congruential sequence, the same bytes every time."""
    frames = round(seconds * SAMPLE_RATE)
    samples = bytearray(frames * SAMPLE_BYTES)
    noise = 12345
    for index in range(frames):
        noise = (noise * 1103515245 + 12345) & 0x7FFFFFFF
        tone = 8000 * math.sin(2 * math.pi * TONE_HZ * index / SAMPLE_RATE)
        samples[index * 2 : index * 2 + 2] = int(tone + (noise % 801) - 400).to_bytes(2, "little", signed=True)
    out = io.BytesIO()
    with wave.open(out, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(SAMPLE_BYTES)
        wav.setframerate(SAMPLE_RATE)
        wav.writeframes(bytes(samples))
    return out.getvalue()


def form_body(fields: dict[str, str], audio: bytes) -> tuple[bytes, str]:
    """A multipart/form-data body of the text ``fields`` and the WAV as ``file``, and its Content-Type."""
    parts = [
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in fields.items()
    ]
    file_head = (
        f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="audio.wav"\r\n'
        "Content-Type: audio/wav\r\n\r\n"
    )
    body = b"".join([*parts, file_head.encode(), audio, f"\r\n--{BOUNDARY}--\r\n".encode()])
    return body, f"multipart/form-data; boundary={BOUNDARY}"


def request_fields(model: str, stream: bool, temperature: float | None) -> dict[str, str]:
    """A request's form fields: json answers; streamed with its usage (vLLM's flattened stream options), English
    (vLLM's benchmark's language, so no language detection runs first)."""
    fields = {"response_format": "json", "language": "en"} | ({"model": model} if model else {})
    if stream:
        fields |= {"stream": "true", "stream_include_usage": "true"}
    if temperature is not None:
        fields["temperature"] = str(temperature)
    return fields


def read_transcript(response: dict[str, Any], exchange: Exchange) -> None:
    """A whole answer: ``text``, and the usage when it counts tokens (vLLM's transcription usage is the audio's
    duration in seconds, a translation has none: the row's token counts stay empty)."""
    if "error" in response:
        raise error_event(response)
    usage = response.get("usage") or {}
    if "completion_tokens" in usage:
        exchange.usage(usage)
    exchange.keep_text(response.get("text"))
