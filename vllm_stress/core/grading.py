"""Grading benchmark answers: the letter of a multiple-choice answer, the final number of a math answer, accuracy per
parallelism level and how often two levels agree. The rules: docs/concepts/metrics.md."""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

LETTERS = "ABCD"
_ONLY_LETTER = re.compile(r"^\W*([A-Da-d])\W*$")
_MARKED_LETTER = re.compile(
    r"\b(?:answer|option|choice)\s*(?:is\s*)?[:=]?\s*(?:\*\*|__|\(|\[|\{)?\s*([A-Da-d])\b", re.IGNORECASE
)
_WRAPPED_LETTER = re.compile(r"\(([A-Da-d])\)|\[([A-Da-d])\]|\*\*([A-Da-d])\*\*")
_LEADING_LETTER = re.compile(r"^\s*([A-D])\s*[.):]")
_TRAILING_LETTER = re.compile(r"\b([A-D])\W*$")

_NUMBER = r"(?:(?<![\w)])[-−])?(?:\$\s?)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?!\d)"
_NUMBER_RE = re.compile(rf"(?<![\w.]){_NUMBER}")
_HASHES = re.compile(rf"####\s*({_NUMBER})")
_MARKED_NUMBER = re.compile(rf"\banswer\s*(?:is|:|=)\s*[:=]?[^\d$−-]{{0,20}}?({_NUMBER})", re.IGNORECASE)
_BOXED = re.compile(rf"\\boxed\{{\s*({_NUMBER})")


def extract_choice(text: str) -> str | None:
    """The letter (upper case) a multiple-choice answer picks, or None (rules in the module docstring)."""
    match = _ONLY_LETTER.match(text)
    if match:
        return match[1].upper()
    marked = [m for m in _MARKED_LETTER.finditer(text) if not _is_article(text, m)]
    if marked:
        return marked[-1][1].upper()
    wrapped = _WRAPPED_LETTER.findall(text)
    if wrapped:
        return "".join(wrapped[-1]).upper()
    match = _LEADING_LETTER.match(text) or _TRAILING_LETTER.search(text)
    return match[1] if match else None


def _is_article(text: str, match: re.Match[str]) -> bool:
    """A lower-case ``a`` right after a marker and followed by a word: ``the answer is a prime``."""
    return match[1] == "a" and re.match(r"\s+[a-z]", text[match.end(1) :]) is not None


def parse_number(text: str) -> Decimal | None:
    """A number as written (``-$1,234.50``, ``72``) as a Decimal, or None."""
    cleaned = text.replace(",", "").replace("$", "").replace("−", "-").replace(" ", "")
    try:
        return Decimal(cleaned)
    except InvalidOperation:
        return None


def format_number(value: Decimal) -> str:
    """A canonical text for a number: no exponent, no trailing zeros (``18.50`` -> ``18.5``, ``72.0`` -> ``72``)."""
    text = f"{value.normalize():f}"
    return "0" if text in ("-0", "0") else text


def extract_number(text: str) -> str | None:
    """The final number of a math answer in canonical form (``format_number``), or None (rules in the docstring)."""
    for pattern in (_HASHES, _MARKED_NUMBER, _BOXED):
        found = pattern.findall(text)
        if found:
            return _canonical(found[-1])
    found = _NUMBER_RE.findall(text)
    return _canonical(found[-1]) if found else None


def _canonical(number: str) -> str | None:
    value = parse_number(number)
    return None if value is None else format_number(value)


def grade(kind: str, text: str, gold: str) -> tuple[str | None, bool]:
    """``(extracted answer, correct)`` of an answer ``text`` to a question of ``kind`` ("mc" or "math")."""
    if kind == "mc":
        extracted = extract_choice(text)
        return extracted, extracted is not None and extracted == gold.upper()
    extracted = extract_number(text)
    gold_value = parse_number(gold)
    return extracted, extracted is not None and gold_value is not None and Decimal(extracted) == gold_value


def accuracy_by_level(rows: list[dict[str, Any]]) -> dict[int, float]:
    """{parallel: share of correct answers} over rows with ``parallel`` and ``correct`` (bool)."""
    totals: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    for row in rows:
        totals[row["parallel"]][0] += bool(row["correct"])
        totals[row["parallel"]][1] += 1
    return {level: correct / count for level, (correct, count) in sorted(totals.items())}


def agreement(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How often the extracted answers of two parallelism levels are the same, over the questions both answered.

    Returns ``{"levels": [P...], "questions": N, "matrix": [[same answers at Pi and Pj]], "changed": [{"question_id",
    "gold", "answers": {P: extracted or None}}]}``; ``changed`` lists the questions whose answer is not the same at
    every level, in question order. No answer (nothing extracted) counts as an answer of its own.
    """
    answers: dict[str, dict[int, str | None]] = defaultdict(dict)
    gold: dict[str, str] = {}
    for row in rows:
        answers[row["question_id"]][row["parallel"]] = row["extracted"]
        gold[row["question_id"]] = row["gold"]
    levels = sorted({row["parallel"] for row in rows})
    matrix = [[_same(answers.values(), a, b) for b in levels] for a in levels]
    changed = [
        {"question_id": qid, "gold": gold[qid], "answers": {p: by_level.get(p) for p in levels}}
        for qid, by_level in answers.items()
        if len(set(by_level.values())) > 1
    ]
    return {"levels": levels, "questions": len(answers), "matrix": matrix, "changed": changed}


def _same(answers: Iterable[dict[int, str | None]], a: int, b: int) -> int:
    return sum(1 for by_level in answers if a in by_level and b in by_level and by_level[a] == by_level[b])
