"""A soak in the analysis (``--shape soak:HOURS``): its hold cut into equal windows (vllm_stress.core.drift), each
window's latency, throughput, failures and the server's and the client's memory, the least-squares slope of each per
hour, and a verdict per metric that drifted (docs/guides/stress.md, "Soak"; the rule: docs/concepts/drift.md)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import Config, ConfigInput, RunLevels
from vllm_stress.analysis.io.json_types import to_json_types
from vllm_stress.analysis.measures import (
    classify,
    gauge_means,
    per_window,
    percentiles_by_level,
    records,
    tokens_in_windows,
)
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.drift import DRIFT_RULES, MIB, SOAK, SOAK_WINDOWS, drift, verdict
from vllm_stress.core.metrics import health_samples, in_window
from vllm_stress.core.numbers import count, percent, seconds

UNITS = {"server_rss_mib": "MiB", "client_rss_mib": "MiB"}  # the others: seconds, tokens/s or a share


def summarise(config: ConfigInput) -> dict[str, Any]:
    """``soak``: per soak run of the config, its windows, each metric's slope and verdict ([] without a soak)."""
    return {"soak": [soak for run in config.runs if (soak := soak_of(run))]}


def soak_of(run: RunLevels) -> dict[str, Any] | None:
    """The run's soak record, or None when it was no soak or its hold never began."""
    if not str(run.run.meta.get("shape") or "").startswith(SOAK):
        return None
    held = run.windows[run.windows["held"]]
    if held.empty:
        return None
    start, end = float(held["start"].iloc[0]), float(held["end"].iloc[0])
    windows = soak_windows(start, end)
    table = window_table(run, windows)
    hours = ((windows["start"] + windows["end"]) / 2 - start).to_numpy(float) / 3600
    drifts = {}
    for metric, rule in DRIFT_RULES.items():
        result = drift(rule, hours, table[metric].to_numpy(float))
        drifts[metric] = {**result.__dict__, "verdict": verdict(rule, result, UNITS.get(metric, ""))}
    record = {
        "run": str(run.run.path),
        "users": int(held["users"].iloc[0]),
        "hours": (end - start) / 3600,
        "window_s": (end - start) / SOAK_WINDOWS,
        "windows": records(table.assign(start_s=windows["start"] - start)),
        "drift": drifts,
    }
    return cast(dict[str, Any], to_json_types(record))  # its JSON form: NaN as None


def soak_windows(start: float, end: float) -> pd.DataFrame:
    """SOAK_WINDOWS equal windows from ``start`` to ``end`` (users: the window's number, as measures key windows)."""
    edges = np.linspace(start, end, SOAK_WINDOWS + 1)
    return pd.DataFrame({"users": range(SOAK_WINDOWS), "start": edges[:-1], "end": edges[1:]})


def window_of(times: pd.Series, windows: pd.DataFrame) -> pd.Series:
    """Each time's window number (by the in_window rule), -1 outside every window."""
    number = pd.Series(-1, index=times.index)
    for index, a, b in zip(windows["users"], windows["start"], windows["end"], strict=True):
        number[in_window(times, a, b)] = index
    return number


def window_table(run: RunLevels, windows: pd.DataFrame) -> pd.DataFrame:
    """Per window: requests ended in it, the failed share, TTFT p99 and e2e p50 of the measured ones, output tok/s
    streamed in it, the server's KV usage and resident memory (MiB) and the clients' resident memory (MiB)."""
    rows = classify(run.run.requests)
    rows = rows.assign(users=window_of(rows["end_time"], windows))
    ended = rows[(rows["users"] >= 0) & ~rows["aborted"] & ~rows["cancelled"]]
    latency = percentiles_by_level(ended[ended["measured"]], {"ttft": "ttft_s", "e2e": "e2e_s"}, (50, 99))
    requests = ended.groupby("users").size().reindex(windows["users"], fill_value=0)
    failures = ended.groupby("users")["failed"].sum().reindex(windows["users"], fill_value=0)
    output, _ = tokens_in_windows(rows, windows)
    server = run.run.tables.get("server")
    return pd.DataFrame(
        {
            "requests": requests.to_numpy(int),
            "failures": failures.to_numpy(int),
            "failure_share": (failures / requests.where(requests > 0)).to_numpy(float),
            "ttft_p99_s": latency["ttft_p99_s"].reindex(windows["users"]).to_numpy(float),
            "e2e_p50_s": latency["e2e_p50_s"].reindex(windows["users"]).to_numpy(float),
            "output_tokens_per_s": output.to_numpy(float) / (windows["end"] - windows["start"]).to_numpy(float),
            "kv_cache_usage": gauge_means(server, windows, "kv_cache_usage"),
            "server_rss_mib": gauge_means(server, windows, "resident_memory") / MIB,
            "client_rss_mib": client_rss_mib(run.run.tables.get("client_health"), windows),
        }
    )


def client_rss_mib(health: pd.DataFrame | None, windows: pd.DataFrame) -> np.ndarray:
    """Per window: the load generators' resident memory, each process's mean over its samples in the window
    (vllm_stress.core.metrics.health_samples), summed; NaN where no sample says it."""
    samples = [] if health is None else records(health.sort_values("time"))

    def total(a: float, b: float) -> float:
        told = pd.DataFrame(health_samples(samples, a, b), columns=["worker", "rss_mib"]).dropna()
        return float(told.groupby("worker")["rss_mib"].mean().sum()) if len(told) else math.nan

    return per_window(windows, total)


def used(config: Config) -> bool:
    return bool(config.get("soak"))


def overview(label: str, config: Config) -> list[str]:
    sentences = []
    for soak in config["soak"]:
        drifted = [d["verdict"] for d in soak["drift"].values() if d["drifted"]]
        said = "; ".join(drifted) if drifted else "no drift"
        sentences.append(f"{label} soaked {soak['users']} users for {soak['hours']:.2g} h: {said}.")
    return sentences


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    found: list[Block] = [Heading(f"Soak: {label}")]
    for soak in config["soak"]:
        found += soak_blocks(soak)
    return found


def soak_blocks(soak: Mapping[str, Any]) -> list[Block]:
    """A soak's verdicts, its per-window table and its slopes."""
    verdicts = [d["verdict"] for d in soak["drift"].values()]
    note = (
        f"{soak['run']}: {soak['users']} users for {soak['hours']:.3g} h, the hold cut into {SOAK_WINDOWS} windows of "
        f"{soak['window_s']:g} s; a least-squares line per metric, its slope per hour judged by the drift rule "
        f"(docs/concepts/drift.md). {'; '.join(verdicts)}."
    )
    headers = ["From (s)", "Requests", "Failed", "TTFT p99", "e2e p50", "Output tok/s", "KV usage", "Server RSS MiB"]
    rows = [
        [
            f"{w['start_s']:.1f}",
            str(w["requests"]),
            percent(w["failure_share"]),
            seconds(w["ttft_p99_s"]),
            seconds(w["e2e_p50_s"]),
            count(w["output_tokens_per_s"]),
            percent(w["kv_cache_usage"]),
            count(w["server_rss_mib"]),
            count(w["client_rss_mib"]),
        ]
        for w in soak["windows"]
    ]
    slopes = [
        [
            DRIFT_RULES[metric].label,
            f"{d['slope_per_h']:+.4g}" if d["slope_per_h"] is not None else "–",
            percent(d["relative_per_h"], signed=True),
            "drift" if d["drifted"] else "no drift",
        ]
        for metric, d in soak["drift"].items()
    ]
    return [
        Paragraph(note),
        Table([*headers, "Client RSS MiB"], rows),
        Table(["Metric", "Slope per hour", "Share of its mean per hour", "Verdict"], slopes),
    ]


def figures(configs: Mapping[str, Config], out: Path) -> dict[str, Path]:
    """Each soak's per-window figures against time, each as a share of its mean."""
    from vllm_stress.analysis.figures.soakplot import soak_figure  # here: matplotlib only when plots are drawn

    return {
        f"Soak drift: {label}": soak_figure(soak, out / f"soak_{index}_{number}.png")
        for index, (label, config) in enumerate(configs.items())
        for number, soak in enumerate(config["soak"])
    }
