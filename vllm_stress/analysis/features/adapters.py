"""LoRA adapters in the report: per level and adapter (requests.csv's ``adapter``: the model each request was drawn
to ask for, client/adapters.py), the successful requests, TTFT percentiles and output throughput; and per level what
the server's LoRA gauges held (server_metrics.csv's LoRA columns), which core/bound.py reads for "adapter-bound"."""

from __future__ import annotations

from typing import TypedDict

import numpy as np
import pandas as pd

from vllm_stress.analysis.io.load import Run
from vllm_stress.analysis.measures import classify, tokens_in_windows
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.metrics import in_window, percentile

ADAPTERS_NOTE = (
    "Per level and adapter (the model each request asked for, drawn with --lora-adapters): successful requests that "
    "ended in the level's window, their TTFT, and the output tokens they streamed in it per second."
)


class AdapterLevel(TypedDict):
    users: int
    adapter: str
    requests: int
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    output_tokens_per_s: float | None


def adapter_levels(run: Run, windows: pd.DataFrame) -> list[AdapterLevel]:
    """The per-level, per-adapter rows of one run; [] when no request was drawn from an adapter pool."""
    rows = classify(run.requests)
    if "adapter" not in rows or not (rows["adapter"].fillna("").astype(str) != "").any():
        return []
    rows = rows.assign(adapter=rows["adapter"].fillna("").astype(str))
    by_users = windows.set_index("users")
    ended = rows[in_window(rows["end_time"], rows["users"].map(by_users["start"]), rows["users"].map(by_users["end"]))]
    result: list[AdapterLevel] = []
    for adapter, group in rows.groupby("adapter", sort=True):
        output, _ = tokens_in_windows(group, windows)
        measured = ended[(ended["adapter"] == adapter) & ended["measured"]]
        for users, window in by_users.iterrows():
            ttft = measured.loc[measured["users"] == users, "ttft_s"].dropna().to_numpy(dtype=float)
            tokens = float(output.get(users, np.nan)) / (window["end"] - window["start"])
            result.append(
                {
                    "users": int(users),  # type: ignore[call-overload]  # the index holds the level's int
                    "adapter": str(adapter) or "(run's model)",
                    "requests": int((measured["users"] == users).sum()),
                    "ttft_p50_s": _number(percentile(ttft, 50)) if len(ttft) else None,
                    "ttft_p99_s": _number(percentile(ttft, 99)) if len(ttft) else None,
                    "output_tokens_per_s": _number(tokens),
                }
            )
    return sorted(result, key=lambda row: (row["users"], row["adapter"]))


def merge_runs(per_run: list[list[AdapterLevel]]) -> list[AdapterLevel]:
    """One config's rows: each (level, adapter) averaged over the runs that have it (repeats)."""
    rows = [row for run in per_run for row in run]
    if len(per_run) < 2 or not rows:
        return rows
    table = pd.DataFrame(rows).groupby(["users", "adapter"], as_index=False).mean()
    return [
        {  # type: ignore[misc]  # the columns are AdapterLevel's
            key: (None if isinstance(value, float) and np.isnan(value) else value) for key, value in record.items()
        }
        | {"requests": int(round(record["requests"]))}
        for record in table.to_dict("records")
    ]


def _number(value: float) -> float | None:
    return None if np.isnan(value) else round(float(value), 6)


def adapter_blocks(label: str, levels: list[AdapterLevel]) -> list[Block]:
    """The report's per-adapter table of a config; [] without adapters."""
    if not levels:
        return []
    header = ["users", "adapter", "requests", "TTFT p50 s", "TTFT p99 s", "output tok/s"]
    body = [
        [
            str(row["users"]),
            row["adapter"],
            str(row["requests"]),
            *(("" if row[key] is None else f"{row[key]:.3f}") for key in ("ttft_p50_s", "ttft_p99_s")),
            "" if row["output_tokens_per_s"] is None else f"{row['output_tokens_per_s']:.1f}",
        ]
        for row in levels
    ]
    return [Heading(f"LoRA adapters: {label}"), Paragraph(ADAPTERS_NOTE), Table(header, body)]
