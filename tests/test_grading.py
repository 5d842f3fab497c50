"""The graders on tricky answers, accuracy per level and the agreement matrix (vllm_stress/core/grading.py)."""

from __future__ import annotations

import pytest

from vllm_stress.core.grading import accuracy_by_level, agreement, extract_choice, extract_number, grade


@pytest.mark.parametrize(
    "text,letter",
    [
        ("B", "B"),
        ("b.", "B"),
        ("(C)", "C"),
        ("**D**", "D"),
        ("The answer is (B).", "B"),
        ("Answer: d", "D"),
        ("The correct option is **C** because the others are wrong.", "C"),
        ("The answer is B because 12 + 30 = 42.", "B"),
        ("Choice A is tempting, but the answer is C.", "C"),
        ("B. Paris is the capital of France.", "B"),
        ("C) 42", "C"),
        ("Looking at the options, (A) is too small and (D) fits.", "D"),
        ("I would go with C.", "C"),
        ("answer is: [a]", "A"),
    ],
)
def test_choice_letters(text, letter):
    assert extract_choice(text) == letter


@pytest.mark.parametrize(
    "text",
    [
        "A good choice would be to think again.",
        "I think B is wrong and so is the other one",
        "The answer is a bit tricky to find",
        "Absolutely. Definitely. Certainly",
        "",
    ],
)
def test_no_letter_in_words_or_articles(text):
    assert extract_choice(text) is None


@pytest.mark.parametrize(
    "text,number",
    [
        ("First 3 + 4 = 7, then 7 * 10 = 70.\n#### 1,234", "1234"),
        ("She pays $18.50 in total.", "18.5"),
        ("So the total is = 42 dollars", "42"),
        ("The share grew to 72%.", "72"),
        ("The temperature falls to -15 degrees.", "-15"),
        ("It is −3 now.", "-3"),
        ("He loses -$5 on the deal", "-5"),
        ("5-3 = 2", "2"),
        ("The answer is 18.50, which is 2 more than 16.5", "18.5"),
        ("The final answer is: 1,234,567 apples, out of 2,000,000", "1234567"),
        ("Hence \\boxed{72.0} and not 71", "72"),
        ("#### 12 was a guess; after checking, #### 15", "15"),
        ("The values 1, 2, 3 add to 6", "6"),
        ("Version v1.5 costs 3 dollars", "3"),
        ("It took 0.25 hours", "0.25"),
    ],
)
def test_final_numbers(text, number):
    assert extract_number(text) == number


def test_no_number():
    assert extract_number("I do not know.") is None


def test_grade_compares_letters_and_decimal_values():
    assert grade("mc", "The answer is (b)", "B") == ("B", True)
    assert grade("mc", "The answer is (C)", "B") == ("C", False)
    assert grade("mc", "A good choice", "A") == (None, False)
    assert grade("math", "#### 18.50", "18.5") == ("18.5", True)
    assert grade("math", "The answer is 1,000", "1000") == ("1000", True)
    assert grade("math", "The answer is 999", "1000") == ("999", False)
    assert grade("math", "no idea", "3") == (None, False)


def rows(answers: dict[int, list[str | None]], gold: list[str]) -> list[dict]:
    return [
        {"question_id": f"q{i}", "parallel": level, "extracted": answer, "gold": gold[i], "correct": answer == gold[i]}
        for level, per_question in answers.items()
        for i, answer in enumerate(per_question)
    ]


def test_accuracy_and_agreement():
    gold = ["A", "B", "C", "D"]
    table = rows({1: ["A", "B", "C", "A"], 4: ["A", "B", "C", "A"], 16: ["A", "C", None, "D"]}, gold)
    assert accuracy_by_level(table) == {1: 0.75, 4: 0.75, 16: 0.5}
    result = agreement(table)
    assert result["levels"] == [1, 4, 16]
    assert result["questions"] == 4
    assert result["matrix"] == [[4, 4, 1], [4, 4, 1], [1, 1, 4]]
    assert [c["question_id"] for c in result["changed"]] == ["q1", "q2", "q3"]
    assert result["changed"][1] == {"question_id": "q2", "gold": "C", "answers": {1: "C", 4: "C", 16: None}}
