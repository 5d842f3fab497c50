"""Server metrics and traces in the analysis: where each level's client TTFT went, from the server's own span of each
request (server_spans.csv, --otlp-port), and its section of the report (vllm_stress.analysis.io.serverview)."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

from vllm_stress.analysis.features import Config, LevelInput
from vllm_stress.analysis.io.serverview import SPLIT_PERCENTS, TTFT_PARTS
from vllm_stress.analysis.measures import percentiles_by_level
from vllm_stress.analysis.report.render import Block, Paragraph, Table
from vllm_stress.core.numbers import count, seconds

FIELDS = {
    "server_view_requests": "measured requests joined to the server's own span of them (server_spans.csv, "
    "--otlp-port): the rows the TTFT split below is over; 0 when no span came",
    "ttft_before_server_p50_s": "the client TTFT before vLLM's engine saw the request (p50/p99 of client TTFT − the "
    "span's time to first token): network, gateway, vLLM's HTTP layer and frontend",
    "ttft_queue_p50_s": "time in vLLM's scheduler queue (p50/p99 of the span's time in queue), same requests",
    "ttft_prefill_p50_s": "time in the prefill, first scheduled to first token (p50/p99 of the span's), same requests",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    """Per level: the measured requests with a server view, and p50/p99 of their time before vLLM (client TTFT −
    server TTFT), in the queue and in the prefill (NaN without a server view)."""
    measured = level.measured
    viewed = measured[measured["server_ttft_s"].notna() & measured["ttft_s"].notna()]
    split = percentiles_by_level(viewed, TTFT_PARTS, SPLIT_PERCENTS).reindex(measured["users"].unique())
    counts = viewed.groupby("users").size().reindex(split.index, fill_value=0).rename("server_view_requests")
    return pd.concat([counts, split], axis=1)


def used(config: Config) -> bool:
    """A run of the config received spans (server_spans.csv)."""
    return config["unjoined_spans"] is not None


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    """The TTFT split of a config per level, and how many rows have a server view."""
    levels = config["levels"]
    viewed = sum(level.get("server_view_requests") or 0 for level in levels)
    measured = sum(level["requests"] - level["failures"] - (level.get("off_target") or 0) for level in levels)
    text = (
        f"Where the client's TTFT went, from the server's own span of each request: {count(viewed)} of the "
        f"{count(measured)} measured requests of the levels have one; {count(config['unjoined_spans'])} spans "
        "joined no row (other clients'). Before vLLM = client TTFT − the span's TTFT (network, gateway, vLLM's "
        "HTTP layer and frontend); queue and prefill are the span's."
    )
    rows = [
        [str(level["users"]), count(level["server_view_requests"])]
        + [seconds(level.get(f"{part}_p{p}_s")) for part in TTFT_PARTS for p in SPLIT_PERCENTS]
        for level in levels
        if level.get("server_view_requests")
    ]
    headers = [
        "Users",
        "Server view",
        *(f"{name} p{p}" for name in ("Before vLLM", "Queue", "Prefill") for p in SPLIT_PERCENTS),
    ]
    split: list[Block] = [Paragraph(text)]
    return split + ([Table(headers, rows)] if rows else [])
