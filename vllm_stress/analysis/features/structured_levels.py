"""Structured outputs (--json-schema) per level: how many answers were valid, invalid or cut, the TTFT of a
schema's first request (the server may compile its grammar then) against a cached one, and the TPOT of structured
requests against unconstrained ones at the same level: the run's own in a mixed run (--json-schema-share below 1),
else a baseline config's of the same report without schemas (docs/guides/structured-outputs.md)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.metrics import percentile
from vllm_stress.core.numbers import count, formatted, milliseconds, percent

# The level fields this module computes (part of analysis.levels.LEVEL_FIELDS, the report's glossary).
STRUCTURED_FIELDS = {
    "structured_requests": "successful requests ended in the window with a --json-schema",
    "answers_valid": "of those, answer_valid valid",
    "answers_invalid": "answer_valid invalid",
    "answers_cut": "answer_valid cut",
    "validity_rate": "answers_valid / structured_requests",
    "schema_first_uses": "structured requests with schema_first_use 1",
    "ttft_new_schema_p50_s": "TTFT p50 of the measured structured requests with schema_first_use 1",
    "ttft_cached_schema_p50_s": "the same with schema_first_use 0",
    "tpot_structured_p50_s": "TPOT p50 of the measured structured requests",
    "tpot_unconstrained_p50_s": "in a mixed run, the same of those without a schema",
}
COUNTS = ("structured_requests", "answers_valid", "answers_invalid", "answers_cut", "schema_first_uses")


def structured_stats(ended: pd.DataFrame, levels: pd.Index) -> pd.DataFrame:
    """Every STRUCTURED_FIELDS field per level (index ``levels``) from the rows that ended in its window (with the
    ``measured`` flag of analysis.measures.classify)."""
    has_schema = ended["schema_id"].fillna("") != ""
    asked = ended[ended["ok"] & has_schema]
    stats = pd.DataFrame(index=levels)
    stats["structured_requests"] = asked.groupby("users").size()
    for verdict in ("valid", "invalid", "cut"):
        stats[f"answers_{verdict}"] = (asked["answer_valid"] == verdict).groupby(asked["users"]).sum()
    stats["schema_first_uses"] = (asked["schema_first_use"] == 1).groupby(asked["users"]).sum()
    stats[list(COUNTS)] = stats[list(COUNTS)].fillna(0).astype(int)
    stats["validity_rate"] = stats["answers_valid"] / stats["structured_requests"].where(
        stats["structured_requests"] > 0
    )
    measured = ended[ended["measured"]]
    structured = measured[has_schema[ended["measured"]]]
    first = structured["schema_first_use"] == 1
    stats["ttft_new_schema_p50_s"] = _p50(structured[first], "ttft_s", levels)
    stats["ttft_cached_schema_p50_s"] = _p50(structured[~first], "ttft_s", levels)
    stats["tpot_structured_p50_s"] = _p50(structured, "tpot_s", levels)
    plain = _p50(measured[~has_schema[ended["measured"]]], "tpot_s", levels)
    stats["tpot_unconstrained_p50_s"] = plain.where(stats["structured_requests"] > 0)
    return stats


def _p50(rows: pd.DataFrame, column: str, levels: pd.Index) -> pd.Series:
    return pd.Series(
        {users: percentile(level[column].to_numpy(float), 50) for users, level in rows.groupby("users")},
        dtype=float,
    ).reindex(levels)


NOTE = (
    "A structured request is sent without ignore_eos: its grammar ends the answer, max_tokens bounds it. valid: its "
    "schema accepts it; cut: not valid and ended by max_tokens; invalid: any other answer. A first use is the first "
    "time a load-generating process sent that schema: the server compiles its grammar then unless it kept it from "
    "before. TPOT unconstrained: {source}."
)


def baseline_tpot(configs: Mapping[str, Mapping[str, Any]], label: str) -> tuple[str, dict[int, float]]:
    """The unconstrained TPOT p50 per level for ``label``: the first other config without structured requests (its
    tpot_p50_s), as ("baseline NAME", {users: seconds}); ("", {}) without one."""
    for other, config in configs.items():
        if other != label and not any(level.get("structured_requests") for level in config["levels"]):
            return f"baseline {other}", {level["users"]: level["tpot_p50_s"] for level in config["levels"]}
    return "", {}


def structured_blocks(label: str, configs: Mapping[str, Mapping[str, Any]]) -> list[Block]:
    """The per-level structured-output table of config ``label``; [] when it sent no schema."""
    levels = [level for level in configs[label]["levels"] if level.get("structured_requests")]
    if not levels:
        return []
    mixed = any(_number(level.get("tpot_unconstrained_p50_s")) is not None for level in levels)
    source, baseline = ("the same level's requests without a schema", {}) if mixed else baseline_tpot(configs, label)
    rows = []
    for level in levels:
        plain = level.get("tpot_unconstrained_p50_s") if mixed else baseline.get(level["users"])
        structured, plain = _number(level.get("tpot_structured_p50_s")), _number(plain)
        rows.append(
            [
                str(level["users"]),
                *(count(level[field]) for field in COUNTS[:4]),
                percent(level["validity_rate"]),
                count(level["schema_first_uses"]),
                milliseconds(level.get("ttft_new_schema_p50_s")),
                milliseconds(level.get("ttft_cached_schema_p50_s")),
                milliseconds(structured),
                milliseconds(plain),
                formatted(structured / plain if structured is not None and plain else None, "{:.2f}x".format),
            ]
        )
    headers = ["users", "structured", "valid", "invalid", "cut", "validity", "first uses", "TTFT new p50"]
    headers += ["TTFT cached p50", "TPOT p50", "TPOT unconstrained p50", "TPOT ratio"]
    note = NOTE.format(source=source or "none (no mixed run, no baseline config without schemas)")
    return [Heading(f"Structured outputs: {label}"), Paragraph(note), Table(headers, rows)]


def _number(value: object) -> float | None:
    """A summary value as a float, None when it is missing or NaN."""
    return float(value) if isinstance(value, int | float) and not np.isnan(value) else None
