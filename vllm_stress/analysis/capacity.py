"""A configuration's KV-cache ceiling: how many of its sequences the server's KV cache holds, beside where the
throughput saturates and where preemptions start, and whether the cache or the compute is the limit
(docs/concepts/analysis.md, "Capacity planning")."""

from __future__ import annotations

from typing import Any, TypedDict, cast

import pandas as pd

from vllm_stress.analysis.io.load import RunMeta
from vllm_stress.core import bound
from vllm_stress.core.capacity import kv_sequences
from vllm_stress.core.numbers import percent


class KvCeiling(TypedDict):
    """The server's KV cache (run.json server_cache_config) against the run's sequences and levels."""

    block_size: int
    num_gpu_blocks: int
    tokens_per_sequence: int  # run.json input_tokens + output_tokens
    sequences: int  # how many such sequences the cache holds at once (vllm_stress.core.capacity.kv_sequences)
    saturation_users: int | None
    preemption_users: int | None  # the smallest level whose window saw preemptions, None when none did
    usage_at_saturation: float | None  # server_kv_cache_usage_mean at the saturation level
    memory_bound: bool | None  # None without a saturation point
    max_num_seqs: int | None  # the server's, from run.json server_launch (vllm_stress.core.bound.launch_max_num_seqs)
    batch: (
        dict[str, float] | None
    )  # the running batch's ceiling when it capped the saturated levels (bound.batch_ceiling)
    verdict: str


def kv_ceiling(metas: list[RunMeta], levels: pd.DataFrame, saturation_users: int | None) -> KvCeiling | None:
    """The ceiling from the first run whose run.json names the server's KV cache and its token targets, or None."""
    meta = next((m for m in metas if m.get("server_cache_config") and m.get("input_tokens")), None)
    if meta is None or meta.get("output_tokens") is None:
        return None
    cache = meta["server_cache_config"]
    tokens = int(meta["input_tokens"]) + int(meta["output_tokens"])
    sequences = kv_sequences(cache["num_gpu_blocks"], cache["block_size"], tokens)
    preempted = levels.loc[levels["server_preemptions"] > 0, "users"]
    preemption_users = int(preempted.min()) if not preempted.empty else None
    at_saturation = levels.loc[levels["users"] == saturation_users, "server_kv_cache_usage_mean"]
    usage = float(at_saturation.iloc[0]) if not at_saturation.empty and at_saturation.notna().all() else None
    max_num_seqs = next((cap for m in metas if (cap := bound.launch_max_num_seqs(m))), None)
    saturated = cast(list[dict[str, Any]], levels.sort_values("users").to_dict("records"))
    batch = bound.batch_ceiling(saturated, saturation_users, max_num_seqs) if saturation_users is not None else None
    ceiling: KvCeiling = {
        "block_size": cache["block_size"],
        "num_gpu_blocks": cache["num_gpu_blocks"],
        "tokens_per_sequence": tokens,
        "sequences": sequences,
        "saturation_users": saturation_users,
        "preemption_users": preemption_users,
        "usage_at_saturation": usage,
        "memory_bound": None,
        "max_num_seqs": max_num_seqs,
        "batch": batch,
        "verdict": "",
    }
    return judged(ceiling)


def judged(ceiling: KvCeiling) -> KvCeiling:
    """The ceiling with its verdict: memory-bound when the cache cannot hold a sequence per user at the saturation
    point, or preemptions started at or below it; batch-bound when the saturated levels ran their batch flat at
    max_num_seqs (or at a plateau) with requests waiting and the cache not full (vllm_stress.core.bound.batch_ceiling);
    else compute-bound (whatever else holds the throughput: the report's bound verdict says which)."""
    saturation, sequences, tokens = ceiling["saturation_users"], ceiling["sequences"], ceiling["tokens_per_sequence"]
    if saturation is None:
        return {**ceiling, "verdict": f"no steady level: the KV cache holds {sequences} sequences of {tokens} tokens"}
    preempted = ceiling["preemption_users"] is not None and ceiling["preemption_users"] <= saturation
    if sequences <= saturation or preempted:
        verdict = f"memory-bound: saturates at {saturation} users, the KV cache holds {sequences} sequences of {tokens} tokens"
        return {**ceiling, "memory_bound": True, "verdict": verdict}
    full = percent(ceiling["usage_at_saturation"])
    if batch := ceiling["batch"]:
        verdict = (
            f"{bound.batch_note(batch, ceiling['max_num_seqs'])}: saturates at {saturation} users with "
            f"{span(batch, 'running')} running, "
            f"{span(batch, 'waiting')} waiting and the cache {full} full: raise --max-num-seqs before adding compute"
        )
        return {**ceiling, "memory_bound": False, "verdict": verdict}
    verdict = f"compute-bound: saturates at {saturation} users with the cache {full} full"
    return {**ceiling, "memory_bound": False, "verdict": verdict}


def span(batch: dict[str, float], name: str) -> str:
    """The range of the saturated levels' mean ``name`` (running or waiting): "127" or "71 to 874"."""
    low, high = round(batch[f"{name}_min"]), round(batch[f"{name}_max"])
    return f"{low}" if low == high else f"{low} to {high}"
