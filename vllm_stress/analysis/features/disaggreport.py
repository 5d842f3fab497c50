"""The report's section on a disaggregated prefill/decode fleet: per level the prefill and decode instances' load,
the KV transfers, and the client's TTFT split into the prefill instance, the transfer and the first decode step
(vllm_stress.analysis.features.disagg; nothing for a fleet without roles)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from vllm_stress.analysis.report.render import Block, Paragraph, Table
from vllm_stress.core.numbers import count, percent, seconds

HEADERS = [
    "Users",
    "Prefill running / waiting",
    "Decode running / waiting",
    "KV transfers",
    "KV GB (Gbit/s)",
    "Client TTFT (mean)",
    "Prefill",
    "Transfer",
    "First decode step",
    "Split / client",
    "Bound",
]


def known(level: Mapping[str, Any], field: str) -> bool:
    value = level.get(field)
    return value is not None and not math.isnan(value)


def pd_blocks(config: Mapping[str, Any]) -> list[Block]:
    """The P/D table of one config, or nothing when its levels have no TTFT split."""
    levels = [level for level in config["levels"] if known(level, "ttft_client_mean_s")]
    if not levels:
        return []
    rows = [
        [
            str(level["users"]),
            f"{count(level.get('prefill_running_mean'), 1)} / {count(level.get('prefill_waiting_mean'), 1)}",
            f"{count(level.get('decode_running_mean'), 1)} / {count(level.get('decode_waiting_mean'), 1)}",
            count(level.get("kv_transfers")),
            f"{count(level.get('kv_transfer_gb'), 3)} ({count(level.get('kv_transfer_gbps'), 3)})",
            seconds(level["ttft_client_mean_s"]),
            seconds(level.get("ttft_prefill_s")),
            seconds(level.get("ttft_transfer_s")),
            seconds(level.get("ttft_first_decode_s")),
            percent(level.get("ttft_split_ratio")),
            level.get("bound") or "",
        ]
        for level in levels
    ]
    text = (
        f"Disaggregated prefill/decode, {config['label']}: each level's prefill and decode instances (summed means of "
        "their gauges), the KV transfers the decode instances pulled (vLLM's NixlConnector series), and the client's "
        "mean TTFT split into the prefill instance's HTTP time, the transfer and the decode instance's TTFT less the "
        "transfer. The bound names the stage whose part grew with the load."
    )
    return [Paragraph(text), Table(HEADERS, rows)]
