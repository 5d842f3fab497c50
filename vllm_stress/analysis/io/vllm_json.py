"""vLLM's ``vllm bench serve --save-result`` JSON both ways: read results as a side of ``compare``, and export our
levels in that layout (``--export-vllm``) for vLLM's tools (docs/concepts/analysis.md, "vLLM result files")."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path
from typing import Any, cast

import pandas as pd

from vllm_stress.analysis.io.json_types import Json, to_json_types
from vllm_stress.analysis.io.load import AnalysisError
from vllm_stress.analysis.measures import PERCENTILES, Level, records
from vllm_stress.analysis.report.pipeline import run_levels
from vllm_stress.analysis.summary import Summary
from vllm_stress.core.schema import REQUESTS_FILE

LATENCIES = {"ttft": "ttft", "tpot": "tpot", "itl": "itl", "e2el": "e2e"}  # vLLM metric -> our field stem
RATES = {
    "request_throughput": "requests_per_s",
    "output_throughput": "output_tokens_per_s",
    "total_token_throughput": "total_tokens_per_s",
}
RENAMED = {"request_goodput:": "request_goodput"}  # a key as an older vLLM wrote it (0.6.4) -> as vLLM 0.32.0 does
NO_VERDICT = (
    "a vllm bench serve result: figures over the whole benchmark, ramp-up and drain included; no steady-state verdict"
)
EXPORT_BACKEND = "openai-chat"
VllmResult = dict[str, Json]  # one result as vllm bench serve --save-result writes it


def read_results(path: str | Path) -> list[pd.DataFrame]:
    """One single-row level frame per result in the file (the columns of ``vllm_stress.analysis.levels.level_stats`` it has)."""
    path = Path(path)
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise AnalysisError(f"{path}: not readable ({exc.__class__.__name__})") from None
    return [pd.DataFrame([level_row(path, result)]) for result in parse_results(path, text)]


def result_files(folder: str | Path) -> list[Path]:
    """The result files of a folder that is not a run folder (no requests.csv): the ``summary.json`` lists of a
    ``vllm bench sweep`` experiment (or of our export), else every ``*.json`` under it; [] for a run folder."""
    folder = Path(folder)
    if not folder.is_dir() or (folder / REQUESTS_FILE).exists():
        return []
    return sorted(folder.rglob("summary.json")) or sorted(folder.rglob("*.json"))


def parse_results(path: Path, text: str) -> list[dict[str, Any]]:
    """The result objects of a file: one object, a list, or one object per line."""
    try:
        document = json.loads(text)
        results = document if isinstance(document, list) else [document]
    except json.JSONDecodeError:
        try:
            results = [json.loads(line) for line in text.splitlines() if line.strip()]
        except json.JSONDecodeError as exc:
            raise AnalysisError(f"{path}: not a run folder and not valid JSON ({exc})") from None
    if not results or not all(isinstance(result, dict) for result in results):
        raise AnalysisError(f"{path}: expected vllm bench serve result objects")
    return results


def level_row(path: Path, result: dict[str, Any]) -> Level:
    """Our level fields from one vLLM result, of any release's field set (docs/concepts/analysis.md): a key the
    release did not write reads as NaN."""
    result = {RENAMED.get(key, key): value for key, value in result.items()}
    if "request_throughput" not in result:
        raise AnalysisError(f"{path}: not a vllm bench serve result (no request_throughput)")
    users = result.get("max_concurrency")
    if isinstance(users, str) and users.isdigit():
        users = int(users)  # a sweep's override may be text
    if not isinstance(users, int) or users < 1:
        raise AnalysisError(
            f"{path}: max_concurrency is {users!r}: only closed-loop results (vllm bench serve "
            "--max-concurrency N) have a level to compare"
        )
    row: Level = {
        "users": users,
        "partial": False,
        "steady": bool(result.get("steady", False)),
        "steady_reason": result.get("steady_reason", NO_VERDICT),
    }
    row |= {field: number(result.get(key)) for key, field in RATES.items()}
    row["goodput_requests_per_s"] = number(result.get("request_goodput"))
    failed = number(result.get("failed"))  # vLLM 0.6.4 writes none (its failures are only in its errors list)
    row |= {"requests": number(result.get("completed")) + failed, "failures": failed}
    for metric, stem in LATENCIES.items():
        for q in PERCENTILES:
            milliseconds = result.get(f"p{q}_{metric}_ms", result.get(f"median_{metric}_ms") if q == 50 else None)
            row[f"{stem}_p{q}_s"] = number(milliseconds) / 1000
    return row


def number(value: object) -> float:
    """A JSON number as float (NaN for null, the strings "nan"/"inf" vLLM's sweep may hold, or anything else)."""
    if not isinstance(value, int | float | str):
        return math.nan
    try:
        return float(value)
    except ValueError:
        return math.nan


def level_result(level: Level, model: str | None, label: str) -> VllmResult:
    """One level of one run as a vllm bench serve result: its steady-state window's figures."""
    window = level["window_s"]
    output = level["output_tokens_per_s"]
    result = {
        "date": time.strftime("%Y%m%d-%H%M%S"),
        "endpoint_type": EXPORT_BACKEND,
        "backend": EXPORT_BACKEND,
        "label": label,
        "model_id": model,
        "tokenizer_id": model,
        "num_prompts": level["requests"],
        "request_rate": "inf",
        "burstiness": 1.0,
        "max_concurrency": level["users"],
        "duration": window,
        "completed": round(level["requests_per_s"] * window),
        "failed": level["failures"],
        "total_input_tokens": round((level["total_tokens_per_s"] - output) * window) if pd.notna(output) else None,
        "total_output_tokens": round(output * window) if pd.notna(output) else None,
        "request_goodput": level.get("goodput_requests_per_s"),
        **{key: level[field] for key, field in RATES.items()},
        "steady": level["steady"],
        "steady_reason": level["steady_reason"],
    }
    for metric, stem in LATENCIES.items():
        values = {q: number(level.get(f"{stem}_p{q}_s")) for q in PERCENTILES}
        if all(math.isnan(value) for value in values.values()):
            continue
        result[f"median_{metric}_ms"] = values[50] * 1000
        result |= {f"p{q}_{metric}_ms": value * 1000 for q, value in values.items()}
    return cast(VllmResult, to_json_types(result))  # its JSON form: NaN as None


def export(summary: Summary, out: str | Path) -> list[Path]:
    """Every level of every run of the summary's configs into ``out``: ``<config>/max_concurrency=<users>/run=<i>.json``
    and a ``summary.json`` list of its runs per level (the layout of ``vllm bench sweep``)."""
    written: list[Path] = []
    for label, config in summary["configs"].items():
        by_level: dict[int, list[VllmResult]] = {}
        for index, run_dir in enumerate(config["run_dirs"]):
            for level in records(run_levels(run_dir)):
                result = level_result(level, config["model"], label) | {"run_number": index}
                folder = Path(out) / slug(label) / f"max_concurrency={level['users']}"
                folder.mkdir(parents=True, exist_ok=True)
                written.append(folder / f"run={index}.json")
                written[-1].write_text(json.dumps(result, indent=4, allow_nan=False) + "\n")
                by_level.setdefault(level["users"], []).append(result)
        for users, results in by_level.items():
            folder = Path(out) / slug(label) / f"max_concurrency={users}"
            (folder / "summary.json").write_text(json.dumps(results, indent=4, allow_nan=False) + "\n")
    return written


def slug(label: str) -> str:
    """A label as a folder name."""
    return re.sub(r"[^\w.=-]+", "-", label).strip("-") or "config"
