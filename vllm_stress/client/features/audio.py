"""Audio (speech-to-text models): how long the synthetic audio of an audio user's request is, and whether it asks
for a transcription or a translation (locustfiles/audio.py, docs/guides/endpoints.md)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from vllm_stress.client.audio import TASK_PATHS, max_seconds

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def audio_seconds(text: str) -> float:
    """Seconds of audio: a positive number whose WAV vLLM takes (its 25 MB file limit)."""
    value = float(text)
    if not 0 < value <= max_seconds():
        raise argparse.ArgumentTypeError(
            f"must be above 0 and at most {max_seconds():.0f} s (vLLM's 25 MB audio file limit), got {text}"
        )
    return value


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--audio-seconds",
        type=audio_seconds,
        default=10.0,
        help="Audio users (locustfiles/audio.py): seconds of the synthetic audio each request sends (16 kHz mono "
        "16-bit WAV, a tone with a little noise); its rows' audio_s",
    )
    group.add_argument(
        "--audio-task",
        choices=tuple(TASK_PATHS),
        default="transcription",
        help="Audio users: transcription (/v1/audio/transcriptions) or translation to English "
        "(/v1/audio/translations); the rows' name",
    )
