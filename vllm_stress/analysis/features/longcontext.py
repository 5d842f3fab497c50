"""Long contexts in the analysis: each level's prefill, as the server's throughput (prompt tokens it computed per
second) and as the speed one request's prefill ran at (the server's own prefill time), its engine steps (how many a
second and the tokens each scheduled: a chunked prefill fills them to the step's budget), with a column group of the
per-level table and a section when the prompts were long (docs/concepts/long-context.md)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from vllm_stress.analysis.features import Column, Config, LevelInput
from vllm_stress.analysis.measures import counter_gains, per_window, records, token_times
from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.bound import histogram_mean
from vllm_stress.core.metrics import in_window
from vllm_stress.core.numbers import count, seconds

FIELDS = {
    "prompt_tokens_mean": "prompt tokens of the measured requests (usage), their mean",
    "prefill_tokens_per_s": "prompt tokens the server computed for the requests whose first token came in the window "
    "(usage less the cached tokens it said it had) / window_s: its prefill throughput",
    "server_prefill_mean_s": "the server's mean time in prefill (vllm:request_prefill_time_seconds: first scheduled "
    "to first token, every chunk of a chunked prefill) of the requests it finished in the scrape intervals wholly "
    "inside the window",
    "prefill_tokens_per_s_per_request": "the speed one request's prefill ran at: the measured requests' mean "
    "computed prompt tokens / server_prefill_mean_s; at one user, the engine's prefill rate",
    "engine_steps_per_s": "engine steps the server ran in the window (vllm:iteration_tokens_total's count gained) "
    "per second of it",
    "step_tokens_mean": "tokens an engine step scheduled, the mean over the window's steps (vllm:iteration_tokens_total"
    ": its sum gained / its count gained): a decode step schedules one per running request, a chunk of a long "
    "prompt's prefill up to the step's budget (max_num_batched_tokens)",
}
LONG_PROMPT_TOKENS = 16384  # a level whose mean prompt reaches this is a long-context level: the report shows its
# prefill (docs/concepts/long-context.md)
NOTE = (
    "Prefill per level: the server's throughput is the prompt tokens it computed (usage less the cached tokens) for "
    "the requests whose first token came in the window, per second of the window; one request's prefill speed is the "
    "mean computed prompt of the measured requests over the server's mean time in prefill "
    "(vllm:request_prefill_time_seconds, first scheduled to first token). At one user they differ only by the "
    "decode time between prefills; with more, prefills share steps with each other and with decodes, and the "
    "throughput grows while each request's speed falls. The engine's steps (vllm:iteration_tokens_total) show the "
    "chunking: a step schedules one token per running decode and a chunk of a prefill up to its budget, so tokens "
    "per step near max_num_batched_tokens are steps of chunked prefill (docs/concepts/long-context.md)."
)


def level_fields(level: LevelInput) -> pd.DataFrame:
    index = level.base.index
    measured = level.measured
    computed = computed_prompt_tokens(measured)
    fields = pd.DataFrame(
        {
            "prompt_tokens_mean": measured.groupby("users")["prompt_tokens"].mean().reindex(index),
            "prefill_tokens_per_s": prefill_throughput(level.rows, level.windows),
            "server_prefill_mean_s": server_prefill_means(level.run.tables.get("server"), level.windows),
        },
        index=index,
    )
    per_request = computed.groupby(measured["users"]).mean().reindex(index)
    fields["prefill_tokens_per_s_per_request"] = per_request / fields["server_prefill_mean_s"]
    server, windows = level.run.tables.get("server"), level.windows
    steps = counter_gains(server, windows, "engine_steps")
    window_s = (windows["end"] - windows["start"]).to_numpy(float)
    fields["engine_steps_per_s"] = pd.Series(steps / window_s, index=windows["users"]).reindex(index)
    tokens_per_step = counter_gains(server, windows, "step_tokens") / np.where(steps > 0, steps, np.nan)
    fields["step_tokens_mean"] = pd.Series(tokens_per_step, index=windows["users"]).reindex(index)
    return fields


def computed_prompt_tokens(rows: pd.DataFrame) -> pd.Series:
    """Per row, the prompt tokens the server computed: usage (else the length it was built to) less cached tokens."""
    prompt = rows["prompt_tokens"].fillna(rows["target_prompt_tokens"])
    return (prompt - rows["cached_tokens"].fillna(0)).clip(lower=0)


def prefill_throughput(rows: pd.DataFrame, windows: pd.DataFrame) -> np.ndarray:
    """Per window: the computed prompt tokens of the rows whose first token came in it (token_times' rule: rows that
    got a first token or succeeded), per second of the window."""
    first, _end, _output, computed = token_times(rows.assign(prompt_tokens=computed_prompt_tokens(rows)))
    tokens = per_window(windows, lambda a, b: computed[in_window(first, a, b)].sum())
    throughput: np.ndarray = tokens / (windows["end"] - windows["start"]).to_numpy(float)
    return throughput


def server_prefill_means(server: pd.DataFrame | None, windows: pd.DataFrame) -> np.ndarray:
    scrapes = [] if server is None else records(server.sort_values("time"))
    return per_window(windows, lambda a, b: histogram_mean(scrapes, "prefill", a, b))


def used(config: Config) -> bool:
    """A level whose mean prompt is long (LONG_PROMPT_TOKENS)."""
    return any((level.get("prompt_tokens_mean") or 0) >= LONG_PROMPT_TOKENS for level in config["levels"])


def columns(config: Config) -> list[Column]:
    return [
        Column("Prefill tok/s", lambda level: count(level.get("prefill_tokens_per_s"))),
        Column("Prefill tok/s per request", lambda level: count(level.get("prefill_tokens_per_s_per_request"))),
    ]


def overview(label: str, config: Config) -> list[str]:
    levels = [level for level in config["levels"] if level.get("prefill_tokens_per_s") is not None]
    if not levels:
        return []
    top = max(levels, key=lambda level: level["prefill_tokens_per_s"])
    prompt = count(top.get("prompt_tokens_mean"))
    return [
        f"In {label}, the server prefilled at most {count(top['prefill_tokens_per_s'])} prompt tokens/s, at "
        f"{top['users']} users (prompts of {prompt} tokens on average)."
    ]


def blocks(label: str, config: Config, configs: Mapping[str, Config]) -> list[Block]:
    rows = [
        [
            str(level["users"]),
            count(level.get("prompt_tokens_mean")),
            count(level.get("prefill_tokens_per_s")),
            seconds(level.get("server_prefill_mean_s")),
            count(level.get("prefill_tokens_per_s_per_request")),
            count(level.get("engine_steps_per_s"), 1),
            count(level.get("step_tokens_mean")),
            seconds(level.get("ttft_p50_s")),
        ]
        for level in config["levels"]
    ]
    header = ["Users", "Prompt tokens", "Prefill tok/s", "Server prefill mean", "Prefill tok/s per request"]
    header += ["Engine steps/s", "Tokens per step", "TTFT p50"]
    return [Heading(f"Long prompts: prefill ({label})"), Paragraph(NOTE), Table(header, rows)]
