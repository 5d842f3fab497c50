"""Benchmark questions from MMLU- and GSM8K-shaped JSONL files, and the one place where their prompts and output
budgets are made (docs/concepts/scenarios.md, section 7)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from vllm_stress.core.grading import LETTERS, format_number, parse_number

# Output budget per kind: a letter needs a few tokens; a math answer needs its step-by-step reasoning.
MAX_TOKENS = {"mc": 32, "math": 1024}
MC_INSTRUCTION = "Answer with the letter of the correct choice (A, B, C or D), as in: The answer is (X)."
MATH_INSTRUCTION = "Solve the problem step by step, then give the final number on the last line as: #### <number>"


class DatasetError(ValueError):
    """A dataset file that cannot be read as questions, with the file and line."""


@dataclass(frozen=True)
class Question:
    id: str
    kind: str  # "mc" or "math"
    question: str
    choices: tuple[str, ...]  # four, for "mc"; empty for "math"
    gold: str  # "A".."D" or a number in canonical form
    subject: str = ""


def prompt(question: Question) -> str:
    """The user message asking ``question``."""
    if question.kind == "mc":
        lines = [f"{letter}) {choice}" for letter, choice in zip(LETTERS, question.choices, strict=True)]
        return "\n".join([question.question, "", *lines, "", MC_INSTRUCTION])
    return f"{question.question}\n\n{MATH_INSTRUCTION}"


def load_questions(path: Path, limit: int | None = None) -> list[Question]:
    """The questions of a JSONL file (at most ``limit``, from the top); raises DatasetError."""
    questions: list[Question] = []
    try:
        lines = path.read_text().splitlines()
    except OSError as error:
        raise DatasetError(f"{path}: {error.strerror}") from None
    for number, line in enumerate(lines, 1):
        if limit is not None and len(questions) >= limit:
            break
        if line.strip():
            questions.append(_question(path, number, line))
    if not questions:
        raise DatasetError(f"{path}: no questions")
    if len({q.kind for q in questions}) > 1:
        raise DatasetError(f"{path}: mixes multiple-choice and math lines; use one file per kind")
    return questions


def _question(path: Path, number: int, line: str) -> Question:
    try:
        row = json.loads(line)
        qid = str(row.get("id", number))
        if "choices" in row:
            return Question(
                qid,
                "mc",
                row["question"],
                _choices(row["choices"]),
                _letter(row["answer"]),
                str(row.get("subject", "")),
            )
        return Question(qid, "math", row["question"], (), _final_number(row["answer"]), str(row.get("subject", "")))
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise DatasetError(f"{path}:{number}: not an MMLU or GSM8K line ({type(error).__name__}: {error})") from None


def _choices(choices: list[object]) -> tuple[str, ...]:
    if len(choices) != len(LETTERS):
        raise ValueError(f"expected {len(LETTERS)} choices, got {len(choices)}")
    return tuple(str(choice) for choice in choices)


def _letter(answer: int | str) -> str:
    if isinstance(answer, int) and 0 <= answer < len(LETTERS):
        return LETTERS[answer]
    if isinstance(answer, str) and answer.strip().upper() in LETTERS:
        return answer.strip().upper()
    raise ValueError(f"answer {answer!r} is neither 0-3 nor A-D")


def _final_number(answer: str) -> str:
    value = parse_number(answer.rpartition("####")[2].strip()) if "####" in answer else None
    if value is None:
        raise ValueError(f"answer {answer[-40:]!r} has no '#### <number>'")
    return format_number(value)
