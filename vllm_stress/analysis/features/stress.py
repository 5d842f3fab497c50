"""Stress in the analysis: each level's client cancellations (a population of their own: neither successes nor
failures, in no latency figure), what the server did with their slots (its running gauge and generated tokens; vLLM
counts no client abort), how bursty its arrivals were, what each microburst did to the server's queue and to TTFT,
and whether --stop-on ended the step ramp early (docs/guides/stress.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import Column, Config, ConfigInput, LevelInput
from vllm_stress.analysis.io.load import Run
from vllm_stress.analysis.measures import classify, counter_gains, records, tokens_in_windows
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.metrics import in_window, percentile
from vllm_stress.core.numbers import count, formatted, percent

FIELDS = {
    "cancelled": "requests of the level the client cancelled (--cancel-share) that ended in the window: neither "
    "successes nor failures, in no latency figure",
    "cancel_share": "cancelled / (requests + cancelled): the share of the level's ended requests the client cut",
    "cancelled_chunks_mean": "output chunks a cancelled request received before its cut, the mean",
    "server_generated_per_received": "output tokens the server generated in the window (vllm:generation_tokens "
    "gained) / output tokens the clients received in it: near 1 when the engine stops generating for a request the "
    "client cut, above when it goes on",
    "arrival_cv": "the coefficient of variation of the gaps between the level's arrivals in the window (sd / mean): "
    "1 for Poisson arrivals, 1/sqrt(B) for gamma arrivals of burstiness B; an open loop's arrivals are its scheduled "
    "sends (a session's first turn in an open loop of sessions), a closed loop's all its sends",
}


def level_fields(level: LevelInput) -> pd.DataFrame:
    """Cancellations, the server's generated tokens per received one and the send gaps' CV, per level."""
    index = level.base.index
    ended = level.ended
    cancelled = ended["cancelled"].groupby(ended["users"]).sum().reindex(index, fill_value=0)
    started = cancelled + level.base["requests"]
    chunks = ended.loc[ended["cancelled"], "chunks"].groupby(ended["users"]).mean().reindex(index)
    received, _prompts = tokens_in_windows(level.rows, level.windows)  # both in the windows' order
    generated = counter_gains(level.run.tables.get("server"), level.windows, "generation_tokens")
    per_received = pd.Series(generated, index=received.index) / received.where(received > 0)
    return pd.DataFrame(
        {
            "cancelled": cancelled,
            "cancel_share": cancelled / started.where(started > 0),
            "cancelled_chunks_mean": chunks,
            "server_generated_per_received": per_received.reindex(index),
            "arrival_cv": arrival_cvs(level.rows, level.windows).reindex(index),
        },
        index=index,
    )


def arrival_cvs(rows: pd.DataFrame, windows: pd.DataFrame) -> pd.Series:
    """Per level: the CV of the gaps between the arrivals (start_time) inside its window (NaN with fewer than three):
    the sends that kept a schedule (a schedule lag: every request of an open loop, the first turn of each session of
    an open loop of sessions), or every send in a closed loop."""
    scheduled = rows["schedule_lag_s"].notna()
    arrivals = rows[scheduled] if scheduled.any() else rows
    cvs = {}
    for users, start, end in zip(windows["users"], windows["start"], windows["end"], strict=True):
        level = arrivals[(arrivals["users"] == users) & in_window(arrivals["start_time"], start, end)]
        sends = np.sort(level["start_time"])
        gaps = np.diff(sends)
        cvs[users] = float(gaps.std() / gaps.mean()) if len(gaps) >= 2 and gaps.mean() > 0 else np.nan
    return pd.Series(cvs, dtype=float)


def microbursts(run: Run, every_s: float) -> pd.DataFrame:
    """Per microburst of a run (its rows' ``burst``): its requests, the spread of their sends, the server's queue
    (server_metrics.csv's waiting) at the last scrape before the burst's first send and its peak over the ``every_s``
    from it, and the TTFT (p50, p99) of the burst's measured requests and of the others sent after its last send
    and before the next burst."""
    every = classify(run.requests)
    sent_in_burst = every["burst"].notna()
    rows, others = every[sent_in_burst], every[~sent_in_burst & every["measured"]]
    server = run.tables.get("server")
    scrapes = server.sort_values("time") if server is not None else pd.DataFrame(columns=["time", "waiting"])
    table = []
    for _, burst in rows.groupby("burst"):
        first, last = burst["start_time"].min(), burst["start_time"].max()
        after = others[in_window(others["start_time"], last, first + every_s)]
        before = scrapes.loc[scrapes["time"] < first, "waiting"]
        ttfts = {"burst": burst.loc[burst["measured"], "ttft_s"], "after": after["ttft_s"]}
        table.append(
            {
                "burst": int(burst["burst"].iloc[0]),
                "requests": len(burst),
                "sent_within_ms": 1000 * (last - first),
                "queue_before": float(before.iloc[-1]) if len(before) else np.nan,
                "queue_peak": scrapes.loc[in_window(scrapes["time"], first, first + every_s), "waiting"].max(),
                **{
                    f"ttft_{name}_p{q}_s": percentile(t.to_numpy(float), q)
                    for name, t in ttfts.items()
                    for q in (50, 99)
                },
                "after_requests": len(after),
            }
        )
    return pd.DataFrame(table)


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``stress``: what the first run that asked for bursts or cancellations asked (run.json's ``stress``);
    ``stopped``: where --stop-on ended the first run it ended early, and why (run.json's ``stopped``);
    ``microbursts``: the first run with --microburst's bursts (``microbursts``)."""
    keys = {}
    for key in ("stress", "stopped"):
        if said := next((run.run.meta.get(key) for run in config.runs if run.run.meta.get(key)), None):
            keys[key] = said
    for run in config.runs:
        if asked := (run.run.meta.get("stress") or {}).get("microburst"):
            keys["microbursts"] = records(microbursts(run.run, asked["every_s"]))
            break
    return keys


def used(config: Config) -> bool:
    return bool(config.get("stress") or config.get("stopped"))


def columns(config: Config) -> list[Column]:
    return [Column("cancelled", lambda level: count(level.get("cancelled")))] if config.get("stress") else []


def overview(label: str, config: Config) -> list[str]:
    asked = config.get("stress") or {}
    said = []
    if asked.get("cancel_share"):
        said.append(f"the client cancelled {percent(asked['cancel_share'])} of its requests at {asked['cancel_after']}")
    if asked.get("arrival_rate") and asked.get("burstiness") != 1:
        said.append(f"arrivals came in bursts (burstiness {asked['burstiness']:g})")
    if burst := asked.get("microburst"):
        said.append(f"{burst['requests']} requests came within {burst['within_ms']:g} ms every {burst['every_s']:g} s")
    sentences = [f"In {label}, {' and '.join(said)}."] if said else []
    if stopped := config.get("stopped"):
        sentences.append(f"{label}: Stopped early after {stopped['after_users']} users: {stopped['reason']}.")
    return sentences


NOTE = (
    "Cancelled requests are counted apart: neither successes nor failures, in no latency figure. vLLM counts no "
    "client abort in its metrics (its abort path drops the request before its finished-request statistics), so the "
    "slot a cancellation frees shows in what it does export: the running gauge falls back and the generation "
    "counter stops for that request, so the server generates about the tokens the clients received."
)


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    asked = config.get("stress")
    if not asked:  # only --stop-on: its overview line says it all
        return []
    expected = 1 / np.sqrt(asked["burstiness"]) if asked.get("arrival_rate") else None
    arrivals = (
        f"Open loop at {asked['arrival_rate']:g} arrivals/s, burstiness {asked['burstiness']:g}: the gaps' coefficient "
        f"of variation should be {expected:.2f}{', microbursts aside' if asked.get('microburst') else ''}."
        if expected is not None
        else "Open loop of microbursts alone: the arrival CV is the bursts' rhythm."
        if asked.get("microburst")
        else "Closed loop: the arrival CV is the users' own rhythm."
    )
    rows = [
        [
            str(level["users"]),
            count(level.get("cancelled")),
            percent(level.get("cancel_share")),
            count(level.get("cancelled_chunks_mean"), 1),
            formatted(level.get("server_running_mean"), "{:.1f}".format),
            formatted(level.get("server_generated_per_received"), "{:.2f}".format),
            formatted(level.get("arrival_cv"), "{:.2f}".format),
        ]
        for level in config["levels"]
    ]
    headers = ["users", "cancelled", "share", "chunks before the cut", "running (server)", "generated / received"]
    return [
        Heading(f"Stress: cancellations and bursts: {label}"),
        Paragraph(f"{NOTE} {arrivals}"),
        Table([*headers, "arrival CV"], rows),
        *burst_blocks(asked.get("microburst"), config.get("microbursts") or []),
    ]


def burst_blocks(asked: Mapping[str, float] | None, bursts: list[dict[str, Any]]) -> list[Block]:
    """The microbursts' table: per burst, the server's queue and the TTFT of its requests against those after it."""
    if not asked:
        return []
    seconds = "{:.3f}".format
    rows = [
        [
            str(burst["burst"]),
            count(burst["requests"]),
            formatted(burst["sent_within_ms"], "{:.0f}".format),
            formatted(burst["queue_before"], "{:.0f}".format),
            formatted(burst["queue_peak"], "{:.0f}".format),
            formatted(burst["ttft_burst_p50_s"], seconds),
            formatted(burst["ttft_burst_p99_s"], seconds),
            count(burst["after_requests"]),
            formatted(burst["ttft_after_p50_s"], seconds),
            formatted(burst["ttft_after_p99_s"], seconds),
        ]
        for burst in bursts
    ]
    headers = ["burst", "requests", "sent within (ms)", "queue before", "queue peak", "TTFT p50 (s)", "TTFT p99 (s)"]
    return [
        Paragraph(
            f"Microbursts of {asked['requests']} requests within {asked['within_ms']:g} ms every "
            f"{asked['every_s']:g} s: the server's queue (vllm:num_requests_waiting) at the last scrape before each "
            "and its peak until the next, and the TTFT of the burst's requests against those sent after it."
        ),
        Table([*headers, "after: requests", "after: TTFT p50 (s)", "after: TTFT p99 (s)"], rows),
    ]
