"""Image and video inputs of a Qwen-VL-style vision-language model: the ``image_url`` and ``video_url`` data URLs of
a chat request decoded to their size (a video: its JPEG frames), resized as the model's processor does, and costed in
prompt tokens and encoder FLOPs (docs/concepts/simulator.md, section 8, "Images" and "Video")."""

from __future__ import annotations

import base64
import binascii
import functools
import io
import math
import zlib
from dataclasses import dataclass

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


def video_cost(width: int, height: int, frames: int, key: int, profile: Profile) -> ImageCost:
    """A video's cost as vLLM's Qwen2-VL processor counts it: each frame resized as an image, the frames padded to a
    whole number of temporal patches, one token per merged patch of each temporal patch (so a token per frame pair);
    the encoder's FLOPs by the same 2 x parameters per patch rule."""
    frame = image_cost(width, height, key, profile)
    temporal = profile.vision_temporal_patch_size
    grid_t = max(-(-min(frames, profile.video_max_frames) // temporal), 1)
    return ImageCost(grid_t * frame.tokens, grid_t * frame.encoder_flops, key)


def decode_data_url(url: str) -> bytes:
    """The bytes of a ``data:image/...;base64,`` URL; ApiError for any other URL (the simulator fetches nothing)."""
    head, sep, payload = url.partition(",")
    if not (sep and head.startswith("data:image/") and head.endswith(";base64")):
        raise ApiError("image_url: the simulator takes base64 data:image/... URLs only", param="messages")
    return decode_base64(payload, "image_url")


def decode_base64(payload: str, part: str) -> bytes:
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ApiError(f"{part}: the data URL is not valid base64", param="messages") from None


@functools.lru_cache(maxsize=IMAGES_KEPT)
def read_image(url: str, profile: Profile) -> ImageCost:
    """The cost of the image a data URL holds (Pillow reads its header only); kept for the next request with it."""
    # imported on first use (docs/contributing.md, "Imports")
    from PIL import Image, UnidentifiedImageError

    data = decode_data_url(url)
    try:
        width, height = Image.open(io.BytesIO(data)).size
        return image_cost(width, height, zlib.crc32(data), profile)
    except (UnidentifiedImageError, ValueError) as error:
        raise ApiError(f"image_url: cannot read the image ({error})", param="messages") from None


@functools.lru_cache(maxsize=IMAGES_KEPT)
def read_video(url: str, profile: Profile) -> ImageCost:
    """The cost of a ``data:video/jpeg;base64,FRAME,FRAME...`` URL, the JPEG-sequence form vLLM's video loader reads
    without a decoder (each frame's header read by Pillow; all frames of one size, as vLLM stacks them)."""
    # imported on first use (docs/contributing.md, "Imports")
    from PIL import Image, UnidentifiedImageError

    head, sep, payload = url.partition(",")
    if not (sep and head.lower() == "data:video/jpeg;base64"):
        raise ApiError("video_url: the simulator takes base64 data:video/jpeg;base64,... URLs only", param="messages")
    frames = payload.split(",")[: profile.video_max_frames]
    try:
        sizes = {Image.open(io.BytesIO(decode_base64(frame, "video_url"))).size for frame in frames}
    except UnidentifiedImageError as error:
        raise ApiError(f"video_url: cannot read a frame ({error})", param="messages") from None
    if len(sizes) != 1:
        raise ApiError(f"video_url: the frames differ in size ({sorted(sizes)})", param="messages")
    (width, height), key = sizes.pop(), zlib.crc32(payload.encode())
    try:
        return video_cost(width, height, len(frames), key, profile)
    except ValueError as error:
        raise ApiError(f"video_url: cannot read the video ({error})", param="messages") from None


READERS = {"image_url": read_image, "video_url": read_video}  # a content part's type -> its reader


def message_images(body: dict, profile: Profile) -> list[list[ImageCost]]:
    """Per message of a chat body, the images and videos of its ``image_url`` and ``video_url`` parts, in order."""
    images = []
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, dict) else None
        parts = [part for part in content if isinstance(part, dict)] if isinstance(content, list) else []
        media = [(READERS[part["type"]], part.get(part["type"])) for part in parts if part.get("type") in READERS]
        images.append([read(str(url.get("url") if isinstance(url, dict) else url), profile) for read, url in media])
    return images
