"""The arithmetic a capacity plan is signed off on, shared by the report (``python -m analysis``) and ``python -m
scenarios plan``: what a million tokens cost at a measured throughput, how many replicas a target rate takes
(docs/concepts/analysis.md, "Capacity planning"), and the saturation point, shared by the report and the live
dashboard."""

from __future__ import annotations

import math
from collections.abc import Mapping

SATURATION_TOLERANCE = 0.05  # the saturation point is the smallest level within this share of the best throughput
SECONDS_PER_HOUR = 3600.0
PER_TOKENS = 1e6  # costs are per million tokens, as API prices are quoted


def usd_per_million_tokens(tokens_per_s: float | None, gpu_hour_price: float, gpus: int) -> float:
    """What a million tokens cost when ``gpus`` GPUs at ``gpu_hour_price`` $ an hour each produce ``tokens_per_s``:
    price × gpus / (tok/s × 3600) × 1e6. NaN without a throughput (none, NaN or 0)."""
    if tokens_per_s is None or not tokens_per_s > 0:
        return math.nan
    return gpu_hour_price * gpus / (tokens_per_s * SECONDS_PER_HOUR) * PER_TOKENS


def saturation_users(throughput: Mapping[int, float]) -> int:
    """The saturation point of {users: throughput}: the smallest level whose throughput is within
    SATURATION_TOLERANCE of the best level's (levels without a throughput left out; ValueError when none has one)."""
    measured = {users: value for users, value in throughput.items() if math.isfinite(value)}
    floor = (1 - SATURATION_TOLERANCE) * max(measured.values())
    return min(users for users, value in measured.items() if value >= floor)


# vLLM's block pool keeps one block as its null block (v1/core/block_pool.py): num_gpu_blocks - 1 hold sequences
NULL_BLOCKS = 1


def kv_sequences(num_gpu_blocks: int, block_size: int, tokens_per_sequence: int) -> int:
    """How many sequences of ``tokens_per_sequence`` tokens (prompt + output) the KV cache holds at once: its usable
    blocks over the blocks one sequence takes, ceil(tokens / block_size) (a sequence's last block is whole)."""
    return (num_gpu_blocks - NULL_BLOCKS) // -(-tokens_per_sequence // block_size)


# A level meets the report's per-request --slo when this share of its requests met every limit (its goodput_ratio):
# the p99 that latency SLOs name
SLO_SHARE = 0.99


def replicas_for(target: float, headroom: float, per_replica: float) -> int:
    """Replicas that serve ``target`` with ``headroom`` to spare (0.2: 20 %) when one sustains ``per_replica``:
    ceil(target × (1 + headroom) / per_replica), the quotient rounded to 9 decimals first so that a product such
    as 300 × 1.2 = 360.00000000000006 does not round up."""
    return math.ceil(round(target * (1 + headroom) / per_replica, 9))
