"""The report of a parallel-query run (``python -m scenarios parallel``): per dataset, accuracy, time and speedup per
parallelism level, the agreement between levels and the answers that changed (docs/concepts/analysis.md)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from vllm_stress.analysis.figures.plots import new_figure
from vllm_stress.analysis.report.render import Block, Bullets, Heading, Image, Paragraph, Table, to_html, to_markdown
from vllm_stress.core.formats import FORMAT_VERSION
from vllm_stress.core.grading import accuracy_by_level, agreement
from vllm_stress.core.numbers import count, percent, ratio, seconds
from vllm_stress.core.schema import REPORT_HTML, REPORT_MD, SUMMARY_JSON

TITLE = "Parallel queries: wall-clock speedup and answers that don't change"
SPEEDUP_PNG = "speedup.png"
MAX_CHANGED_LISTED = 50
SIMULATED_NOTE = (
    "The target was the embedded simulator: its answers come from a configurable answer model (a set accuracy, and "
    "a seeded chance that an answer flips that grows with the requests in flight; vllm_stress/simulator/model/answers.py). The "
    "accuracy and the changed answers here show that the grading and agreement code work end to end; they are not "
    "any model's accuracy or determinism."
)
NONDETERMINISM_NOTE = (
    "Temperature 0 (greedy decoding) with a fixed seed is not a promise of the same answer: on a GPU, the order of "
    "floating-point reductions depends on the batch a request shares, so when two tokens are nearly tied the choice "
    "can flip with the load. The agreement matrix counts, for each pair of levels, the questions whose extracted "
    "answer is the same; answers that differ are listed below it (answers.csv has every reply in full)."
)


AnswerRow = dict[str, Any]  # a row of answers.csv (scenarios/studies/parallel.py): dataset, parallel, question_id, ...


class ParallelLevel(TypedDict):
    """One parallelism level of a dataset."""

    parallel: int
    questions: int
    accuracy: float
    mean_e2e_s: float | None
    wall_s: float
    output_tokens_per_s: float
    errors: int
    unanswered: int
    speedup: NotRequired[float]  # the first level's wall clock over this one's


class Dataset(TypedDict):
    """One dataset: what the run says of it, its levels and the agreement between them."""

    path: str
    kind: str  # "mc" (multiple choice) or "num" (final number)
    questions: int
    levels: list[ParallelLevel]
    agreement: dict[str, Any]  # vllm_stress.core.grading.agreement: levels, questions, matrix, changed


class ParallelSummary(TypedDict):
    """summary.json of a parallel-query run."""

    format_version: int  # vllm_stress.core.formats.FORMAT_VERSION of the suite that wrote it
    title: str
    target: str
    simulated: bool
    model: str
    seed: int
    simulator_args: list[str]
    max_tokens: dict[str, int]  # per kind of question
    datasets: dict[str, Dataset]


def summarise(
    rows: list[AnswerRow], walls: Mapping[tuple[str, int], float], meta: Mapping[str, Any]
) -> ParallelSummary:
    """The summary (summary.json) of answer rows and level wall clocks; ``meta["datasets"]`` names the datasets."""
    datasets: dict[str, Dataset] = {}
    for name, info in meta["datasets"].items():
        subset = [row for row in rows if row["dataset"] == name]
        levels = list(dict.fromkeys(row["parallel"] for row in subset))
        accuracy = accuracy_by_level(subset)
        stats = [level_stats([r for r in subset if r["parallel"] == p], walls[name, p], accuracy[p]) for p in levels]
        for level in stats:
            level["speedup"] = stats[0]["wall_s"] / level["wall_s"]
        datasets[name] = {
            "path": info["path"],
            "kind": info["kind"],
            "questions": info["questions"],
            "levels": stats,
            "agreement": agreement(subset),
        }
    return cast(
        ParallelSummary, {"format_version": FORMAT_VERSION, "title": TITLE, **meta, "datasets": datasets}
    )  # meta: the run's other keys


def level_stats(rows: list[AnswerRow], wall_s: float, accuracy: float) -> ParallelLevel:
    """One level's accuracy, time, wall clock, throughput, errors and unanswered questions."""
    ok = [row for row in rows if not row["error"]]
    return {
        "parallel": rows[0]["parallel"],
        "questions": len(rows),
        "accuracy": accuracy,
        "mean_e2e_s": sum(row["e2e_s"] for row in ok) / len(ok) if ok else None,
        "wall_s": wall_s,
        "output_tokens_per_s": sum(row["completion_tokens"] or 0 for row in ok) / wall_s,
        "errors": len(rows) - len(ok),
        "unanswered": sum(1 for row in ok if not row["extracted"]),
    }


def write_report(summary: ParallelSummary, out: Path) -> None:
    """speedup.png, report.md, report.html and summary.json into ``out``."""
    plot = plot_speedup(summary, out / SPEEDUP_PNG)
    blocks = build_report(summary, plot)
    (out / REPORT_MD).write_text(to_markdown(blocks))
    (out / REPORT_HTML).write_text(to_html(blocks, TITLE))
    (out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")


def plot_speedup(summary: ParallelSummary, path: Path) -> Path:
    """Speedup against parallelism per dataset, with the ideal (speedup = P / baseline P) dashed."""
    figure, (ax,) = new_figure()
    levels = sorted({level["parallel"] for d in summary["datasets"].values() for level in d["levels"]})
    for name, dataset in summary["datasets"].items():
        points = sorted((level["parallel"], level["speedup"]) for level in dataset["levels"])
        ax.plot(*zip(*points, strict=True), marker="o", label=name)
    baseline = next(iter(summary["datasets"].values()))["levels"][0]["parallel"]
    ax.plot(levels, [p / baseline for p in levels], linestyle="--", color="grey", label="ideal (linear)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(p) for p in levels])
    ax.set(title="Wall-clock speedup vs parallelism", xlabel="requests in flight (P)", ylabel="speedup (x)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    figure.savefig(path, dpi=100)
    return path


def build_report(summary: ParallelSummary, plot: Path) -> list[Block]:
    blocks: list[Block] = [Heading(TITLE, 1), Paragraph(overview(summary))]
    if summary["simulated"]:
        blocks.append(Paragraph(SIMULATED_NOTE))
    for name, dataset in summary["datasets"].items():
        blocks += [
            Heading(f"{name} ({dataset['questions']} questions, {kind_name(dataset['kind'])})"),
            level_table(dataset),
        ]
    blocks += [
        Image("Wall-clock speedup vs parallelism", plot),
        Heading("Answers that changed with parallelism"),
        Paragraph(NONDETERMINISM_NOTE),
    ]
    for name, dataset in summary["datasets"].items():
        blocks += [Heading(name, 3), agreement_table(dataset["agreement"]), *changed_blocks(dataset["agreement"])]
    return blocks + method_blocks(summary)


def kind_name(kind: str) -> str:
    return "multiple choice" if kind == "mc" else "final number"


def overview(summary: ParallelSummary) -> str:
    """One sentence per dataset: speedup of the last level, accuracy change, answers changed."""
    sentences = [f"Target {summary['target']}, model {summary['model']}."]
    for name, dataset in summary["datasets"].items():
        first, last = dataset["levels"][0], dataset["levels"][-1]
        changed = changed_between(dataset["agreement"], first["parallel"], last["parallel"])
        sentences.append(
            f"{name}: {last['parallel']} requests in flight finished {ratio(last['speedup'])} faster than "
            f"{first['parallel']} (wall clock {duration(first['wall_s'])} -> {duration(last['wall_s'])}); accuracy "
            f"{percent(first['accuracy'])} -> {percent(last['accuracy'])}; {changed} of {dataset['questions']} answers "
            f"changed between P={first['parallel']} and P={last['parallel']}."
        )
    return " ".join(sentences)


def duration(value: float) -> str:
    """Wall clock as the parallel-query benchmark writes it: minutes from two minutes on."""
    return f"{value / 60:.1f} min" if value >= 120 else seconds(value)


def level_table(dataset: Dataset) -> Table:
    """The parallel-query benchmark's table: one row per parallelism level."""
    rows = [
        [
            str(level["parallel"]),
            percent(level["accuracy"]),
            seconds(level["mean_e2e_s"]),
            duration(level["wall_s"]),
            "baseline" if index == 0 else ratio(level["speedup"]),
            count(level["output_tokens_per_s"]),
            str(level["errors"]),
            str(level["unanswered"]),
        ]
        for index, level in enumerate(dataset["levels"])
    ]
    headers = [
        "Parallelism",
        "Accuracy",
        "Avg time/question",
        "Wall clock",
        "Speedup",
        "Output tok/s",
        "Errors",
        "No answer",
    ]
    return Table(headers, rows)


def changed_between(result: dict[str, Any], a: int, b: int) -> int:
    levels = result["levels"]
    same: int = result["matrix"][levels.index(a)][levels.index(b)]
    return int(result["questions"]) - same


def agreement_table(result: dict[str, Any]) -> Table:
    """Same answers for each pair of levels, as 'same/questions'."""
    levels, total = result["levels"], result["questions"]
    rows = [[f"P={a}", *(f"{same}/{total}" for same in result["matrix"][i])] for i, a in enumerate(levels)]
    return Table(["Same answer as", *(f"P={b}" for b in levels)], rows)


def changed_blocks(result: dict[str, Any]) -> list[Block]:
    changed = result["changed"]
    if not changed:
        return [Paragraph("Every question got the same answer at every level.")]
    levels = result["levels"]
    rows = [
        [c["question_id"], c["gold"], *(c["answers"][p] or "(none)" for p in levels)]
        for c in changed[:MAX_CHANGED_LISTED]
    ]
    blocks: list[Block] = [Table(["Question", "Right answer", *(f"P={p}" for p in levels)], rows)]
    if len(changed) > MAX_CHANGED_LISTED:
        blocks.append(Paragraph(f"{len(changed) - MAX_CHANGED_LISTED} more changed answers are in answers.csv."))
    return blocks


def method_blocks(summary: ParallelSummary) -> list[Block]:
    max_tokens = ", ".join(f"{kind_name(kind)} {limit}" for kind, limit in summary["max_tokens"].items())
    items = [
        f"Every question once per level, non-streaming /v1/chat/completions, temperature 0, seed {summary['seed']}, "
        f"max_tokens: {max_tokens}; levels one after the other, after one warm-up request.",
        "Wall clock: first request sent to last answer of the level. Avg time/question: mean end-to-end latency of "
        "its successful requests. Speedup: the first level's wall clock over this level's. Output tok/s: completion "
        "tokens over the wall clock.",
        "Grading (vllm_stress/core/grading.py): the letter of a multiple-choice answer ('The answer is (B)', 'Answer: d', "
        "'**C**'; not a capital inside a sentence such as 'A good choice'), the final number of a math answer "
        "('#### 1,234', '$18.50', '72%'); failures and answers without one count as wrong ('No answer').",
        "Datasets: " + "; ".join(f"{name}: {d['path']}" for name, d in summary["datasets"].items()) + ".",
    ]
    if summary["simulated"]:
        items.append(f"Simulator arguments: {' '.join(summary['simulator_args'])}.")
    return [Heading("Method"), Bullets(items)]
