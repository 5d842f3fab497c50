"""Synthetic images for a vision-language model's prompts (``--images``), made before the run: seeded noise encoded
as PNG or JPEG data URLs, sent as ``image_url`` parts of the chat message (docs/concepts/load-generator.md)."""

from __future__ import annotations

import base64
import io
import random
import re
from dataclasses import dataclass

IMAGE_FORMATS = {"jpeg": "JPEG", "png": "PNG"}  # --image-format -> Pillow's encoder
DEFAULT_IMAGE_SIZE = "512x512"
DEFAULT_IMAGE_POOL = 64  # distinct images a process draws from (each request takes --images of them)
_SIZE = re.compile(r"^\s*(\d+)\s*[xX]\s*(\d+)\s*$")


def parse_size(text: str) -> tuple[int, int]:
    """``"WxH"`` -> (width, height); ValueError for anything else or a side under 1 pixel."""
    match = _SIZE.match(text)
    if not match or min(int(match[1]), int(match[2])) < 1:
        raise ValueError(f"expected WIDTHxHEIGHT in pixels (e.g. 512x512), got {text!r}")
    return int(match[1]), int(match[2])


def data_url(width: int, height: int, image_format: str, seed: str) -> str:
    """One seeded noise image as a ``data:image/...;base64,`` URL: random pixels, so no two images share a prefix-
    or processor-cache entry and JPEG cannot shrink them to nothing."""
    # imported on first use (docs/contributing.md, "Imports")
    from PIL import Image

    pixels = random.Random(seed).randbytes(width * height * 3)
    buffer = io.BytesIO()
    Image.frombytes("RGB", (width, height), pixels).save(buffer, format=IMAGE_FORMATS[image_format])
    return f"data:image/{image_format};base64,{base64.b64encode(buffer.getvalue()).decode('ascii')}"


@dataclass
class ImageSet:
    """The images a process sends: a pool made at test start, drawn ``per_request`` at a time, and the prompt tokens
    those images add (measured on the server at test start; 0 until then)."""

    pool: list[str]
    per_request: int
    tokens: int = 0

    def draw(self, rng: random.Random) -> tuple[str, ...]:
        return tuple(rng.sample(self.pool, self.per_request))


def make_image_set(per_request: int, size: str, image_format: str, pool: int, seed: str) -> ImageSet:
    """``pool`` distinct images of ``size`` (at least ``per_request``), seeded by ``seed`` and their index."""
    width, height = parse_size(size)
    count = max(pool, per_request)
    return ImageSet([data_url(width, height, image_format, f"{seed}-{n}") for n in range(count)], per_request)


def message_content(text: str, images: tuple[str, ...], videos: tuple[str, ...] = ()) -> str | list[dict]:
    """A user message's content: the text alone, or the text part then one ``image_url`` part per image and one
    ``video_url`` part per video (text first: a random text before them keeps them out of the prefix cache's shared
    prefixes)."""
    if not images and not videos:
        return text
    return [
        {"type": "text", "text": text},
        *({"type": "image_url", "image_url": {"url": url}} for url in images),
        *({"type": "video_url", "video_url": {"url": url}} for url in videos),
    ]
