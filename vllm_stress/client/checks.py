"""The checks a run makes before it starts, as pure functions of the options: one ``StopTarget`` line per refusal."""

from __future__ import annotations

import argparse

from vllm_stress.client import adapters, cancel
from vllm_stress.client.classes import declared
from vllm_stress.client.hubdataset import HubDatasetError
from vllm_stress.client.images import parse_size
from vllm_stress.client.pacing import parse_microburst
from vllm_stress.client.prompts import load_dataset
from vllm_stress.client.sessiontrace import parse_start_share, read_sessions
from vllm_stress.client.trace import read_trace
from vllm_stress.core.slo import parse_items


class StopTarget(Exception):
    pass


def check_hit_rate(options: argparse.Namespace) -> None:
    """--prefix-hit-rate: a rate below 1, whole blocks, synthetic prompts without --prefix-tokens."""
    rate = options.prefix_hit_rate
    if options.kv_block_size is not None and options.kv_block_size < 1:
        raise StopTarget(f"--kv-block-size must be at least 1, got {options.kv_block_size}")
    if rate is None:
        return
    if not 0 <= rate < 1:
        raise StopTarget(f"--prefix-hit-rate must be at least 0 and below 1 (the last token is computed), got {rate:g}")
    clash = next(
        (
            flag
            for flag, value in (
                ("--prefix-tokens", options.prefix_tokens),
                ("--dataset", options.dataset),
                ("--trace", getattr(options, "trace", None)),
            )
            if value
        ),
        None,
    )
    if clash:
        raise StopTarget(f"--prefix-hit-rate builds its own prompts: drop {clash}")


def check_videos(options: argparse.Namespace) -> None:
    """--videos: a count of at least 0; with videos, frames, a frame size and a frame rate a server can take."""
    if options.videos < 0:
        raise StopTarget(f"--videos must be at least 0, got {options.videos}")
    if not options.videos:
        return
    if options.video_frames < 1:
        raise StopTarget(f"--video-frames must be at least 1, got {options.video_frames}")
    try:
        parse_size(options.video_size)
    except ValueError as e:
        raise StopTarget(f"--video-size: {e}") from None
    if options.video_fps is not None and not options.video_fps > 0:
        raise StopTarget(f"--video-fps must be more than 0, got {options.video_fps:g}")


def validate(options: argparse.Namespace) -> None:
    """Refuse option values that no run can use, with a one-line StopTarget."""
    if getattr(options, "repeats", 1) > 1:  # a scenario's `repeats` (scenarios/shape.py): only the runner repeats
        raise StopTarget(
            f"repeats = {options.repeats}: plain Locust runs once; use `python -m scenarios run`, or pass "
            "--repeats 1 and run it that many times into separate --results-dir folders"
        )
    for flag, value in (("--input-tokens", options.input_tokens), ("--output-tokens", options.output_tokens)):
        if value < 1:
            raise StopTarget(f"{flag} must be at least 1, got {value}")
    if not options.request_timeout > 0:
        raise StopTarget(f"--request-timeout must be more than 0 seconds, got {options.request_timeout:g}")
    if not 0 <= options.prefix_tokens < options.input_tokens:
        raise StopTarget(
            f"--prefix-tokens must be at least 0 and less than --input-tokens ({options.input_tokens}), "
            f"got {options.prefix_tokens}"
        )
    if options.prefix_groups < 1:
        raise StopTarget(f"--prefix-groups must be at least 1, got {options.prefix_groups}")
    check_hit_rate(options)
    for flag, value in (("--turns", options.turns), ("--turn-tokens", options.turn_tokens)):
        if value < 1:
            raise StopTarget(f"{flag} must be at least 1, got {value}")
    if not options.think_time >= 0:
        raise StopTarget(f"--think-time must not be negative, got {options.think_time:g}")
    if options.token_spread < 0:
        raise StopTarget(f"--token-spread must not be negative, got {options.token_spread:g}")
    for flag, value in (("--reasoning-budget", options.reasoning_budget), ("--images", options.images)):
        if value < 0:
            raise StopTarget(f"{flag} must be at least 0, got {value}")
    if options.images:
        try:
            parse_size(options.image_size)
        except ValueError as e:
            raise StopTarget(f"--image-size: {e}") from None
        if options.image_pool < 1:
            raise StopTarget(f"--image-pool must be at least 1, got {options.image_pool}")
    check_videos(options)
    try:
        cancel.check_options(options)
    except ValueError as e:
        raise StopTarget(str(e)) from None
    if options.num_prompts < 0:
        raise StopTarget(f"--num-prompts must be at least 0 (0: the whole --dataset), got {options.num_prompts}")
    if options.dataset:
        try:
            load_dataset(options.dataset)
        except HubDatasetError as e:  # names the dataset: --dataset hf:ORG/NAME: why
            raise StopTarget(f"--dataset {e}") from None
        except (OSError, ValueError) as e:
            raise StopTarget(f"--dataset: {e}") from None
    check_classes(options)
    check_profile(options)
    try:
        parse_microburst(options.microburst)
    except ValueError as e:
        raise StopTarget(str(e)) from None
    if options.trace:
        if options.arrival_rate or options.microburst:
            flag = "--arrival-rate" if options.arrival_rate else "--microburst"
            raise StopTarget(f"--trace and {flag} both set when to send: give one")
        if not options.speedup > 0:
            raise StopTarget(f"--speedup must be more than 0, got {options.speedup:g}")
        try:
            read_trace(options.trace)
        except (OSError, ValueError) as e:
            raise StopTarget(f"--trace: {e}") from None
    check_session_trace(options)
    try:
        adapters.check_options(options)
    except ValueError as e:
        raise StopTarget(str(e)) from None


def check_profile(options: argparse.Namespace) -> None:
    """--profile-at or --profile-when-running (not both), at least 1, for --profile-seconds above 0."""
    at, running = options.profile_at, options.profile_when_running
    if at is not None and running is not None:
        raise StopTarget("--profile-at and --profile-when-running both say when to profile: give one")
    for flag, value in (("--profile-at", at), ("--profile-when-running", running)):
        if value is not None and value < 1:
            raise StopTarget(f"{flag} must be at least 1, got {value}")
    if not options.profile_seconds > 0:
        raise StopTarget(f"--profile-seconds must be more than 0, got {options.profile_seconds:g}")


def check_session_trace(options: argparse.Namespace) -> None:
    """--session-trace: a readable file, whole blocks, a cap of at least 0 and a start share in [0, 1]."""
    if options.trace_block_size is not None and options.trace_block_size < 1:
        raise StopTarget(f"--trace-block-size must be at least 1, got {options.trace_block_size}")
    if options.idle_gap_cap is not None and options.idle_gap_cap < 0:
        raise StopTarget(f"--idle-gap-cap must be at least 0 seconds, got {options.idle_gap_cap:g}")
    try:
        start = parse_start_share(options.session_start)
    except ValueError as e:
        raise StopTarget(str(e)) from None
    if not options.session_trace:
        if start:
            raise StopTarget("--session-start: only with --session-trace (where a session's turns are recorded)")
        return
    if options.trace:
        raise StopTarget("--trace and --session-trace both give the requests: give one")
    try:
        read_sessions(options.session_trace)
    except (OSError, EOFError, ValueError) as e:
        raise StopTarget(f"--session-trace: {e}") from None


def check_model(options: argparse.Namespace, model: str, served: dict[str, int | None], host: str) -> None:
    """The server must serve ``model``, and the target lengths must fit its max_model_len (when it lists them)."""
    if served and model not in served:
        raise StopTarget(f"model {model!r} is not served by {host} (it serves: {', '.join(served)})")
    max_model_len = served.get(model)
    if not max_model_len:
        return
    if options.dataset:  # prompt lengths are the dataset's
        if options.output_tokens >= max_model_len:
            raise StopTarget(
                f"--output-tokens {options.output_tokens} leaves no room for a prompt in "
                f"{model}'s max_model_len of {max_model_len}"
            )
    elif options.input_tokens + options.output_tokens > max_model_len:
        raise StopTarget(
            f"--input-tokens {options.input_tokens} + --output-tokens {options.output_tokens} = "
            f"{options.input_tokens + options.output_tokens} tokens exceeds {model}'s max_model_len of "
            f"{max_model_len} at {host}"
        )


def check_classes(options: argparse.Namespace) -> None:
    """--traffic-class: well-formed, each SLO in the --slo grammar and each dataset readable."""
    try:
        for traffic_class in declared(options):
            if traffic_class.slo:
                parse_items(traffic_class.slo)
            if traffic_class.dataset:
                load_dataset(traffic_class.dataset)
    except (OSError, ValueError) as e:
        raise StopTarget(f"--traffic-class: {e}") from None
