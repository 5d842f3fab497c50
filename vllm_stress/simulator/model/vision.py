"""Image inputs of a Qwen-VL-style vision-language model: the ``image_url`` data URLs of a chat request decoded to
their size, resized as the model's image processor does, and costed in prompt tokens and encoder FLOPs
(docs/concepts/simulator.md, section 8, "Images")."""

from __future__ import annotations

import base64
import binascii
import functools
import io
import math
import zlib
from dataclasses import dataclass

from PIL import Image, UnidentifiedImageError

from .errors import ApiError
from .profiles import Profile

MAX_ASPECT_RATIO = 200  # the processor refuses a longer side over 200 times the shorter
IMAGES_KEPT = 64  # a workload's image pool is sent again and again: decoded once each


def smart_resize(height: int, width: int, factor: int, min_pixels: int, max_pixels: int) -> tuple[int, int]:
    """The size the Qwen2-VL image processor resizes an image to: both sides multiples of ``factor`` (patch size x
    merge size), the area within [min_pixels, max_pixels], the aspect ratio kept as well as that allows
    (transformers' ``image_processing_qwen2_vl.smart_resize``)."""
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise ValueError(f"absolute aspect ratio must be smaller than {MAX_ASPECT_RATIO}, got {height}x{width}")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


@dataclass(frozen=True)
class ImageCost:
    """One image's cost: the prompt tokens it expands to, the encoder's FLOPs, and a key that tells images apart
    (vLLM hashes an image's content into the prefix cache's block hashes)."""

    tokens: int
    encoder_flops: float
    key: int


def image_cost(width: int, height: int, key: int, profile: Profile) -> ImageCost:
    """Tokens after smart_resize: one per merge_size x merge_size patches of patch_size pixels; the encoder's FLOPs
    by the 2 x parameters per patch rule, over the patches before merging."""
    factor = profile.vision_patch_size * profile.vision_merge_size
    h_bar, w_bar = smart_resize(height, width, factor, profile.vision_min_pixels, profile.vision_max_pixels)
    tokens = (h_bar // factor) * (w_bar // factor)
    patches = tokens * profile.vision_merge_size**2
    return ImageCost(tokens, 2.0 * profile.vision_params * patches, key)


def decode_data_url(url: str) -> bytes:
    """The bytes of a ``data:image/...;base64,`` URL; ApiError for any other URL (the simulator fetches nothing)."""
    head, sep, payload = url.partition(",")
    if not (sep and head.startswith("data:image/") and head.endswith(";base64")):
        raise ApiError("image_url: the simulator takes base64 data:image/... URLs only", param="messages")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError("image_url: the data URL is not valid base64", param="messages") from None


@functools.lru_cache(maxsize=IMAGES_KEPT)
def read_image(url: str, profile: Profile) -> ImageCost:
    """The cost of the image a data URL holds (Pillow reads its header only); kept for the next request with it."""
    data = decode_data_url(url)
    try:
        width, height = Image.open(io.BytesIO(data)).size
        return image_cost(width, height, zlib.crc32(data), profile)
    except (UnidentifiedImageError, ValueError) as error:
        raise ApiError(f"image_url: cannot read the image ({error})", param="messages") from None


def message_images(body: dict, profile: Profile) -> list[list[ImageCost]]:
    """Per message of a chat body, the images of its ``image_url`` parts, in order."""
    images = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        parts = content if isinstance(content, list) else []
        urls = [part.get("image_url") for part in parts if isinstance(part, dict) and part.get("type") == "image_url"]
        images.append([read_image(str(url.get("url") if isinstance(url, dict) else url), profile) for url in urls])
    return images
