"""When requests are sent: an open loop's arrival rate, or a trace's timestamps."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vllm_stress.client.features import PATH

if TYPE_CHECKING:
    from vllm_stress.client.features import OptionGroup


def add_arguments(group: OptionGroup) -> None:
    group.add_argument(
        "--arrival-rate",
        type=float,
        default=0.0,
        help="Open loop: send requests at this total rate (req/s, Poisson arrivals, split over "
        "--expect-workers workers; the session user starts sessions at it); the users are only the pool that "
        "carries them (0: closed loop)",
    )
    group.add_argument(
        "--trace",
        default="",
        form=PATH,
        help="Replay a trace: Mooncake JSONL (timestamp ms, input_length, output_length, hash_ids), Bailian JSONL "
        "(chat_id, timestamp s, input_length, output_length, hash_ids; either may be .gz), Azure LLM inference CSV "
        "(TIMESTAMP, ContextTokens, GeneratedTokens) or BurstGPT CSV (Timestamp s, Request tokens, Response tokens; "
        "its failed rows left out); the users carry its lines",
    )
    group.add_argument("--speedup", type=float, default=1.0, help="With --trace: divide the trace's gaps by this")
    group.add_argument("--trace-start", type=float, default=0.0, help="With --trace: seconds of the trace to skip")
    group.add_argument(
        "--trace-duration", type=float, default=0.0, help="With --trace: seconds of the trace to replay (0: to its end)"
    )
    group.add_argument(
        "--trace-block-size",
        type=int,
        default=None,
        help="With --trace or --session-trace: tokens of one hash id's block (default: the trace format's own, "
        "Mooncake's 512, Bailian's 16)",
    )
