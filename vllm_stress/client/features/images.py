"""Synthetic images with each chat prompt, for vision-language models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.images import DEFAULT_IMAGE_POOL, DEFAULT_IMAGE_SIZE, IMAGE_FORMATS

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--images",
        type=int,
        default=0,
        help="Chat requests to a vision-language model: this many synthetic images with each prompt (image_url "
        "data URLs after the text); the tokens they add are measured on the server at test start (0: text only)",
    )
    group.add_argument(
        "--image-size", default=DEFAULT_IMAGE_SIZE, help="With --images: WIDTHxHEIGHT of every image, in pixels"
    )
    group.add_argument(
        "--image-format", choices=tuple(IMAGE_FORMATS), default="jpeg", help="With --images: how the images are encoded"
    )
    group.add_argument(
        "--image-pool",
        type=int,
        default=DEFAULT_IMAGE_POOL,
        help="With --images: distinct images each worker makes before the run (seeded noise) and draws from",
    )
