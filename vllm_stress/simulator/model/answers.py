"""The simulated model's answers to benchmark questions: a letter for multiple choice, a final number for math, right
with a set probability and flipping under load (docs/concepts/simulator.md, section 9)."""

from __future__ import annotations

import ast
import json
import operator
import random
import re
import zlib
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import TypeVar

from .profiles import Profile
from .sampling import sample_output_length, text_bytes

LETTERS = "ABCD"
_CHOICE_LINE = re.compile(r"^[ \t]*\(?([A-D])[).:][ \t]+(\S.*?)[ \t]*$", re.MULTILINE)
_ASKS_NUMBER = re.compile(r"final (?:numeric )?(?:number|answer)|####", re.IGNORECASE)
_PHRASE = re.compile(
    r"\b(sum|product|difference|quotient) (?:of|between) (-?\d+(?:\.\d+)?) and (-?\d+(?:\.\d+)?)", re.IGNORECASE
)
_EXPRESSION = re.compile(r"(?<![\w.])-?[\d(][\d\s.+\-*/×÷()]*[\d)]")
_PLAIN_NUMBER = re.compile(r"^\$?(-?\$?[\d,]*\.?\d+)$")
_TOKEN = re.compile(r"\s*(?:\w+|[^\w\s])")
_OPERATORS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}
_PHRASE_OPERATORS = {
    "sum": operator.add,
    "product": operator.mul,
    "difference": operator.sub,
    "quotient": operator.truediv,
}
_WRONG_OFFSETS = (-10, -2, -1, 1, 2, 10)
_CHOICE_FORMATS = ("The answer is ({}).", "Answer: {}", "{}", "**{}**")
_NUMBER_FORMATS = ("#### {}", "The answer is {}.", "So the result is {}.")
Answer = TypeVar("Answer", str, Fraction)  # a letter (multiple choice) or a number (math)


@dataclass(frozen=True)
class Question:
    kind: str  # "mc" or "math"
    stem: str  # the question without its choices
    choices: dict[str, str]  # letter -> choice text (multiple choice only)


@dataclass(frozen=True)
class Reply:
    """What a question's sequence generates: ``reasoning`` pseudo-words, then the answer's tokens, then EOS."""

    reasoning: int
    tokens: tuple[bytes, ...]
    grammar: str = ""  # a structured output's schema text (grammar.py): compiled once, masked every token

    @property
    def length(self) -> int:
        return self.reasoning + len(self.tokens) + 1

    def text(self, offset: int, start: int, end: int) -> bytes:
        """Text of tokens ``start .. end - 1`` (pseudo-words from the word stream at ``offset``, then the answer)."""
        words = text_bytes(offset, start, min(end, self.reasoning)) if start < self.reasoning else b""
        return words + b"".join(self.tokens[max(start - self.reasoning, 0) : max(end - self.reasoning, 0)])


def read_question(text: str) -> Question | None:
    """The question in a user message, or None when it asks for neither a letter nor a number."""
    choices: dict[str, str] = {}
    first_choice = None
    for match in _CHOICE_LINE.finditer(text):
        if match[1] not in choices:
            choices[match[1]] = match[2]
            first_choice = match.start() if first_choice is None else first_choice
    if len(choices) == len(LETTERS):
        return Question("mc", text[:first_choice], choices)
    if _ASKS_NUMBER.search(text):
        return Question("math", text, {})
    return None


def solve(text: str) -> Fraction | None:
    """The value of the arithmetic a question states (phrase first, else its longest expression), or None."""
    phrase = _PHRASE.search(text)
    if phrase:
        try:
            return _PHRASE_OPERATORS[phrase[1].lower()](Fraction(phrase[2]), Fraction(phrase[3]))
        except ZeroDivisionError:
            return None
    for expression in sorted(_EXPRESSION.findall(text), key=len, reverse=True):
        value = _evaluate(expression.replace("×", "*").replace("÷", "/"))
        if value is not None:
            return value
    return None


def _evaluate(expression: str) -> Fraction | None:
    """An expression of numbers, + - * / and parentheses as an exact Fraction; None for a lone number or bad text."""
    try:
        tree = ast.parse(expression.strip(), mode="eval").body
        if isinstance(tree, ast.Constant):
            return None
        return _node_value(tree)
    except (SyntaxError, ValueError, ZeroDivisionError, RecursionError):
        return None


def _node_value(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return Fraction(str(node.value))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_node_value(node.operand)
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_node_value(node.left), _node_value(node.right))
    raise ValueError(f"not arithmetic: {ast.dump(node)}")


def right_choice(question: Question) -> str | None:
    """The letter of the choice equal to the solved stem, or None."""
    value = solve(question.stem)
    if value is None:
        return None
    for letter, choice in question.choices.items():
        match = _PLAIN_NUMBER.match(choice.strip())
        if match and Fraction(match[1].replace(",", "").replace("$", "")) == value:
            return letter
    return None


def format_number(value: Fraction, commas: bool) -> str:
    """A number as a model would write it: integers (with thousands separators if ``commas``), terminating decimals
    in full, others rounded to 2 decimals."""
    if value.denominator == 1:
        return f"{value.numerator:,}" if commas else str(value.numerator)
    exact = Decimal(value.numerator) / Decimal(value.denominator)
    return f"{exact:f}" if Fraction(exact) == value else f"{float(value):.2f}"


class AnswerModel:
    """Replies to question prompts: seeded first-choice and runner-up answers, flips under load."""

    def __init__(self, profile: Profile) -> None:
        for name in ("answer_accuracy", "answer_flip_rate"):
            if not 0.0 <= getattr(profile, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1, got {getattr(profile, name)}")
        self.profile = profile

    def reply(self, messages: list[tuple[str, str]], seed: int, others: int) -> Reply | None:
        """The reply to a chat request, or None when its last user message is not a question."""
        user = [text for role, text in messages if role == "user"]
        question = read_question(user[-1]) if user else None
        if question is None:
            return None
        rng = random.Random(f"{seed}/{zlib.crc32(repr(messages).encode())}")
        if question.kind == "mc":
            letter = self._pick(rng, right_choice(question), list(LETTERS), others)
            return Reply(0, split_tokens(rng.choice(_CHOICE_FORMATS).format(letter)))
        right = solve(question.stem)
        wrong = (
            [Fraction(rng.randint(1, 1000)) for _ in range(len(_WRONG_OFFSETS))]
            if right is None
            else [right + offset for offset in _WRONG_OFFSETS]
        )
        answer = self._pick(rng, right, wrong, others)
        reasoning = sample_output_length(rng, self.profile)
        number = format_number(answer, commas=rng.random() < 0.5)
        return Reply(reasoning, split_tokens(" " + rng.choice(_NUMBER_FORMATS).format(number)))

    def _pick(self, rng: random.Random, right: Answer | None, wrong: list[Answer], others: int) -> Answer:
        """The answer given: the first choice (right with probability ``answer_accuracy``), or a different runner-up
        when the load flips it (probability ``answer_flip_rate`` per other sequence, or always above
        ``answer_fault_batch`` sequences in flight)."""
        wrong = [candidate for candidate in wrong if candidate != right]
        first = right if right is not None and rng.random() < self.profile.answer_accuracy else rng.choice(wrong)
        candidates = wrong if right is None else [right] + wrong
        runner_up = rng.choice([candidate for candidate in candidates if candidate != first])
        flipped = rng.random() < min(1.0, self.profile.answer_flip_rate * others)  # drawn always: the rest of
        fault = self.profile.answer_fault_batch  # the reply (its wording) stays the same whichever answer is given
        if flipped or (fault and others + 1 > fault):
            return runner_up
        return first


def split_tokens(text: str) -> tuple[bytes, ...]:
    """The answer split as the simulator's tokenizer splits text, each token with the spaces before it and escaped
    for a JSON string, as the stream's chunk templates take a token (RequestStream.full_text decodes them)."""
    return tuple(json.dumps(token)[1:-1].encode() for token in _TOKEN.findall(text))
