"""Synthetic videos with each chat prompt, for video-capable vision-language models."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.video import DEFAULT_VIDEO_FRAMES, DEFAULT_VIDEO_SIZE

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--videos",
        type=int,
        default=0,
        help="Chat requests to a video-capable vision-language model: this many synthetic videos with each prompt "
        "(video_url data URLs of JPEG frames after the text); the tokens they add are measured on the server at "
        "test start (0: none)",
    )
    group.add_argument(
        "--video-frames", type=int, default=DEFAULT_VIDEO_FRAMES, help="With --videos: frames in every video"
    )
    group.add_argument(
        "--video-size", default=DEFAULT_VIDEO_SIZE, help="With --videos: WIDTHxHEIGHT of every frame, in pixels"
    )
    group.add_argument(
        "--video-fps",
        type=float,
        default=None,
        help="With --videos: the frame rate the server is told (vLLM's media_io_kwargs; a JPEG-frame video carries "
        "none: unset, vLLM assumes 1 frame/s)",
    )
