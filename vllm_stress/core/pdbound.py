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
PD_FIELDS = {
    "prefill_running_mean": "with --server-metrics-url prefill=URL: the prefill instances' running requests, each "
    "one's mean over the window, summed",
    "prefill_waiting_mean": "the prefill instances' waiting requests, the same way",
    "decode_running_mean": "with --server-metrics-url decode=URL: the decode instances' running requests, summed",
    "decode_waiting_mean": "the decode instances' waiting requests, summed",
    "kv_transfers": "KV transfers the decode instances finished in the window (vllm:nixl_xfer_time_seconds count)",
    "kv_transfer_gb": "KV bytes they pulled in the window (vllm:nixl_bytes_transferred sum), in GB",
    "kv_transfer_gbps": "the same as a rate: kv_transfer_gb × 8 / window_s, Gbit/s",
    "ttft_client_mean_s": "with roles: the measured requests' mean TTFT at the client, the whole the split divides",
    "ttft_prefill_s": "its prefill part: the prefill instances' mean HTTP time (http_request_duration_highr_seconds: "
    "the request in, its one token out), or their engine's mean e2e without HTTP-layer metrics",
    "ttft_transfer_s": "its KV-transfer part: the decode instances' mean vllm:nixl_xfer_time_seconds",
    "ttft_first_decode_s": "its first-decode-step part: the decode instances' mean TTFT less the transfer",
    "ttft_split_ratio": "(prefill + transfer + first decode step) / ttft_client_mean_s: 1 when the split accounts for "
    "the whole TTFT; the rest is the proxy and the network",
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
