"""Synthetic videos for a vision-language model's prompts (``--videos``), made before the run: a seeded noise canvas
panned across its frames, each frame a JPEG, sent as ``video_url`` parts holding a ``data:video/jpeg;base64,`` URL
of the frames' base64 joined by commas: the JPEG-sequence form vLLM's video loader reads with Pillow alone, no video
codec (docs/concepts/load-generator.md, "Video")."""

from __future__ import annotations

import base64
import io
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vllm_stress.client.images import parse_size

if TYPE_CHECKING:
    from PIL import Image

VIDEO_MEDIA_TYPE = "data:video/jpeg;base64,"
DEFAULT_VIDEO_SIZE = "448x448"
DEFAULT_VIDEO_FRAMES = 8
VIDEO_POOL = 8  # distinct videos a process makes before the run (each request takes --videos of them)
PAN_PIXELS = 8  # how far each frame's view moves across the canvas, so no two frames are alike


def frames(width: int, height: int, count: int, seed: str) -> list[Image.Image]:
    """``count`` frames of ``width`` x ``height``: one seeded noise canvas, shifted ``PAN_PIXELS`` more each frame."""
    # imported on first use (docs/contributing.md, "Imports")
    from PIL import Image, ImageChops

    canvas = Image.frombytes("RGB", (width, height), random.Random(seed).randbytes(width * height * 3))
    return [ImageChops.offset(canvas, n * PAN_PIXELS, n * PAN_PIXELS // 2) for n in range(count)]


def jpeg_base64(frame: Image.Image) -> str:
    buffer = io.BytesIO()
    frame.save(buffer, format="JPEG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def data_url(width: int, height: int, count: int, seed: str) -> str:
    """One seeded video as a ``data:video/jpeg;base64,FRAME,FRAME...`` URL."""
    return VIDEO_MEDIA_TYPE + ",".join(jpeg_base64(frame) for frame in frames(width, height, count, seed))


@dataclass
class VideoSet:
    """The videos a process sends: a pool made at test start, drawn ``per_request`` at a time; the frame rate the
    server is told (None: its default); the prompt tokens they add (measured on the server at test start)."""

    pool: list[str]
    per_request: int
    fps: float | None = None
    tokens: int = 0

    def draw(self, rng: random.Random) -> tuple[str, ...]:
        return tuple(rng.sample(self.pool, self.per_request))


def make_video_set(per_request: int, count: int, size: str, fps: float | None, seed: str) -> VideoSet:
    """``VIDEO_POOL`` distinct videos (at least ``per_request``) of ``count`` frames of ``size``, seeded by ``seed``
    and their index."""
    width, height = parse_size(size)
    videos = max(VIDEO_POOL, per_request)
    return VideoSet([data_url(width, height, count, f"{seed}-{n}") for n in range(videos)], per_request, fps)


def fps_fields(fps: float | None) -> dict:
    """The request fields that tell vLLM the videos' frame rate (its per-request ``media_io_kwargs``; a JPEG sequence
    carries none, and vLLM assumes 1 frame/s), none for None."""
    return {} if fps is None else {"media_io_kwargs": {"video": {"fps": fps}}}
