"""A disaggregated prefill/decode fleet's level fields and its bound: which stage of the client's TTFT — the prefill
instance, the KV transfer, the decode instance's first step — grew with the load, so that the level is
"prefill-bound", "transfer-bound" or "decode-bound" (docs/guides/disaggregated.md). One rule for every reader."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

STAGE_GROWTH = 2.0  # a stage took at least this many times its time at the lowest level
STAGE_SHARE = 0.25  # ...and the time it added is at least this share of the level's client TTFT mean
DECODE_QUEUE_MIN = 1.0  # the decode instances' waiting requests (summed means) that make a level decode-bound
STAGES = {  # stage -> the level field of its part of the client's TTFT
    "prefill": "ttft_prefill_s",
    "transfer": "ttft_transfer_s",
    "decode": "ttft_first_decode_s",
}
PD_FIELDS = {  # with --server-metrics-url ROLE=URL; running and waiting: each instance's mean, summed
    "prefill_running_mean": "prefill instances' running requests",
    "prefill_waiting_mean": "prefill instances' waiting requests",
    "decode_running_mean": "decode instances' running requests",
    "decode_waiting_mean": "decode instances' waiting requests",
    "kv_transfers": "KV transfers finished (vllm:nixl_xfer_time_seconds)",
    "kv_transfer_gb": "KV GB moved (vllm:nixl_bytes_transferred)",
    "kv_transfer_gbps": "the same in Gbit/s",
    "ttft_client_mean_s": "the client's mean TTFT, which the split divides",
    "ttft_prefill_s": "its prefill part: the prefill instances' mean HTTP time (else engine e2e)",
    "ttft_transfer_s": "its transfer part: the mean KV transfer",
    "ttft_first_decode_s": "its first-decode-step part: the decode instances' mean TTFT less the transfer",
    "ttft_split_ratio": "the three parts' sum / ttft_client_mean_s (the rest: proxy and network)",
}

Row = Mapping[str, Any]


def _number(row: Row, field: str) -> float:
    value = row.get(field)
    return math.nan if value is None else float(value)


def pd_note(level: Row, lowest: Row) -> str:
    """The P/D bound of ``level`` against the fleet's ``lowest`` level ("" when no stage grew enough): the stage
    whose TTFT part grew at least STAGE_GROWTH times and by at least STAGE_SHARE of the client TTFT mean, the one
    that grew most; else "decode-bound" when the decode instances queued DECODE_QUEUE_MIN requests."""
    ttft = _number(level, "ttft_client_mean_s")
    grown = []
    for stage, field in STAGES.items():
        now, base = _number(level, field), _number(lowest, field)
        if now >= STAGE_GROWTH * base and now - base >= STAGE_SHARE * ttft and base > 0:
            grown.append((now - base, stage, now, base))
    if grown:
        added, stage, now, base = max(grown)
        return (
            f"{stage}-bound: its part of TTFT {now:.3f} s, {now / base:.1f}× the lowest level's, "
            f"{now / ttft:.0%} of the client TTFT"
        )
    waiting = _number(level, "decode_waiting_mean")
    if waiting >= DECODE_QUEUE_MIN:
        return f"decode-bound: the decode instances queued {waiting:.1f} requests"
    return ""


def pd_notes(levels: Sequence[Row]) -> list[str]:
    """``pd_note`` of each level against the level with the fewest users that has a TTFT split ("" for all when
    none has: no P/D roles)."""
    split = [level for level in levels if not math.isnan(_number(level, "ttft_client_mean_s"))]
    if not split:
        return [""] * len(levels)
    lowest = min(split, key=lambda level: level["users"])
    return [pd_note(level, lowest) for level in levels]
