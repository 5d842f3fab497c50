"""Correctness canaries (answers.csv): per level, how many canary answers agree with the lowest level's answer to the
same prompt from the same model, where the first that differ diverge, and how many are right (docs/concepts/metrics.md,
"Canaries"). Their requests are kept apart from every other figure (analysis.load) unless the run or the analysis
counts them in (--canaries-in-figures).

Agreement compares the exact text of one model's answers (answers.csv's ``model``: a run before format 5 has none,
its answers are compared as one model's). The divergence point is counted in words (the text split on whitespace, 1 for
the first word), the unit a reader can find in answers.csv; a tokenizer's tokens would need the model's tokenizer."""

from __future__ import annotations

import csv
from collections import Counter, defaultdict
from pathlib import Path
from typing import TypedDict

from vllm_stress.analysis.report.render import Block, Heading, Paragraph, Table
from vllm_stress.core.grading import LETTERS, grade
from vllm_stress.core.numbers import percent
from vllm_stress.core.schema import ANSWERS_FILE

MAX_FAILING_LISTED = 10  # canary ids named per level in summary.json and the report


class CanaryLevel(TypedDict):
    """One level's canaries: successful answers, those that differ from the lowest level's, and the grading."""

    users: int
    models: list[str]  # the models whose answers were compared at this level ([""] before format 5: not recorded)
    canaries: int  # successful canary answers at this level (compared with the lowest level's)
    differ: int  # of which differ from the lowest level's answer to the same prompt
    agreement: float | None  # 1 - differ / canaries; None without canaries
    first_word: int | None  # the earliest word (1 = first) where a differing answer leaves the lowest level's
    failing: list[str]  # the ids of the prompts whose answer differs, "id (model)" with several models (at most
    # MAX_FAILING_LISTED)
    accuracy: float | None  # share of answers graded right, None when the set has no expected answers


def read_answers(folders: list[Path]) -> list[dict[str, str]]:
    """The successful canary answers of the run folders (none without answers.csv)."""
    rows: list[dict[str, str]] = []
    for folder in folders:
        path = folder / ANSWERS_FILE
        if path.is_file():
            with open(path, newline="", encoding="utf-8") as f:
                rows += [row for row in csv.DictReader(f) if row.get("ok") == "1"]
    return rows


def first_diverging_word(answer: str, reference: str) -> int:
    """The 1-based index of the first word where ``answer`` leaves ``reference`` (one past the shorter when one is
    the other's start)."""
    words, expected = answer.split(), reference.split()
    for index, (word, want) in enumerate(zip(words, expected, strict=False), 1):
        if word != want:
            return index
    return min(len(words), len(expected)) + 1


Key = tuple[str, str]  # (model, canary id): the answers compared with each other


def key_of(row: dict[str, str]) -> Key:
    return row.get("model") or "", row["canary"]


def canary_levels(rows: list[dict[str, str]]) -> list[CanaryLevel]:
    """Per level (ascending) the canaries' agreement with the lowest level's answer to the same prompt from the same
    model (its most common answer at the lowest level that model answered at) and their graded accuracy; empty
    without canaries."""
    if not rows:
        return []
    lowest: dict[str, int] = {}
    for row in rows:
        model, users = key_of(row)[0], int(row["users"])
        lowest[model] = min(users, lowest.get(model, users))
    answers: dict[Key, Counter[str]] = defaultdict(Counter)
    for row in rows:
        if int(row["users"]) == lowest[key_of(row)[0]]:
            answers[key_of(row)][row["answer"]] += 1
    reference = {key: counted.most_common(1)[0][0] for key, counted in answers.items()}
    by_level: dict[int, list[dict[str, str]]] = defaultdict(list)
    for row in rows:
        by_level[int(row["users"])].append(row)
    return [_level(users, by_level[users], reference, len(lowest) > 1) for users in sorted(by_level)]


def _level(users: int, rows: list[dict[str, str]], reference: dict[Key, str], models: bool) -> CanaryLevel:
    compared = [row for row in rows if key_of(row) in reference]
    differing = [row for row in compared if row["answer"] != reference[key_of(row)]]
    graded = [row for row in rows if row["gold"]]
    right = sum(grade("mc" if row["gold"] in LETTERS else "math", row["answer"], row["gold"])[1] for row in graded)
    failing = {f"{row['canary']} ({key_of(row)[0]})" if models else row["canary"] for row in differing}
    return {
        "users": users,
        "models": sorted({key_of(row)[0] for row in compared}),
        "canaries": len(compared),
        "differ": len(differing),
        "agreement": 1 - len(differing) / len(compared) if compared else None,
        "first_word": min(
            (first_diverging_word(row["answer"], reference[key_of(row)]) for row in differing), default=None
        ),
        "failing": sorted(failing)[:MAX_FAILING_LISTED],
        "accuracy": right / len(graded) if graded else None,
    }


def changed_line(levels: list[CanaryLevel]) -> str | None:
    """The report's first-paragraph line for the first level whose canaries differ, or None when all agree."""
    for level in levels:
        if level["differ"]:
            return (
                f"answers changed under load: {level['differ']} of {level['canaries']} canaries differ at "
                f"{level['users']} users, first at word {level['first_word']} ({', '.join(level['failing'])})"
            )
    return None


CANARY_NOTE = (
    "Canaries are fixed prompts sent at temperature 0 with a seed (--canary-share); each answer is compared with the "
    "lowest level's answer to the same prompt from the same model, exact text, the divergence counted in words. "
    "Unless the run or the analysis was given --canaries-in-figures, their requests are kept apart from every "
    "throughput and latency figure above; they are still counted in the run's accounting (failures over the whole "
    "runs, unaccounted requests), and "
    "Locust's statistics show them under their own name ('chat canary')."
)


def canary_blocks(label: str, levels: list[CanaryLevel]) -> list[Block]:
    """The per-level canary table of a config; [] without canaries."""
    if not levels:
        return []
    rows = [
        [
            str(level["users"]),
            ", ".join(level["models"]),
            str(level["canaries"]),
            str(level["differ"]),
            percent(level["agreement"]),
            "" if level["first_word"] is None else str(level["first_word"]),
            percent(level["accuracy"]),
            ", ".join(level["failing"]),
        ]
        for level in levels
    ]
    headers = ["users", "models", "canaries", "differ", "agreement", "first word", "accuracy", "differing prompts"]
    return [Heading(f"Canaries: {label}"), Paragraph(CANARY_NOTE), Table(headers, rows)]
