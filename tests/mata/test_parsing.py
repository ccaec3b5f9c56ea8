"""MATA answer readers: English GRADE lines, Telugu yes/no, multiple-choice answers."""

from __future__ import annotations

import pytest

from service.companions.mata import McqAnswered, McqFormatFailure, parse_grade_en, parse_grade_te, read_mcq_answer

EN = [
    ("The submission names the same river.\nGRADE: C", False, "correct", None),
    ("It names another river.\n\nGRADE: I", False, "incorrect", None),
    ("**GRADE: C**", False, "correct", None),
    ("**GRADE:** I", False, "incorrect", None),
    ("grade: c", False, "correct", None),
    ("GRADE: [I]", False, "incorrect", None),
    ("GRADE: C.", False, "correct", None),
    ("First I thought GRADE: I, but on reflection...\nGRADE: C", False, "correct", None),  # the last one wins
    ("GRADE: C\nGRADE: I", False, "incorrect", None),
    ("GRADE: P", True, "partial", None),
    ("GRADE: P", False, None, "partial_not_enabled"),
    ("GRADE: X", False, None, "unknown_grade"),
    ("GRADE: Correct", False, None, "no_grade"),  # not a whole-token letter
    ("UPGRADE: C", False, None, "no_grade"),
    ("GRADE: CI", False, None, "no_grade"),
    ("The answer is correct.", False, None, "no_grade"),
    ("", False, None, "empty"),
]


@pytest.mark.parametrize(("text", "partial", "verdict", "error"), EN)
def test_english_grades(text: str, partial: bool, verdict: str | None, error: str | None) -> None:
    parsed = parse_grade_en(text, partial_credit=partial)
    assert (parsed.verdict, parsed.error) == (verdict, error)


def test_english_reasoning_is_the_text_before_the_last_grade() -> None:
    parsed = parse_grade_en("Step 1: same river.\nStep 2: same year.\n**GRADE: C**")
    assert parsed.reasoning == "Step 1: same river.\nStep 2: same year."
    assert parse_grade_en("GRADE: C", "length").error == "truncated"


TE = [
    ("అవును", "correct", None),
    ("లేదు", "incorrect", None),
    ("అవును.", "correct", None),
    ("  లేదు  ", "incorrect", None),
    ("Yes", "correct", None),
    ("no.", "incorrect", None),
    ("జవాబు: అవును", "correct", None),
    ("అవును, లేదు", None, "both_yes_and_no"),
    ("Yes, but no", None, "both_yes_and_no"),
    ("అవునండి", None, "neither_yes_nor_no"),  # not the whole word
    ("కాదు", None, "neither_yes_nor_no"),
    ("లేదా", None, "neither_yes_nor_no"),  # "or", not "no"
    ("nobody knows", None, "neither_yes_nor_no"),
    ("", None, "empty"),
]


@pytest.mark.parametrize(("text", "verdict", "error"), TE)
def test_telugu_grades(text: str, verdict: str | None, error: str | None) -> None:
    parsed = parse_grade_te(text)
    assert (parsed.verdict, parsed.error) == (verdict, error)


def test_telugu_truncated_is_a_format_failure() -> None:
    assert parse_grade_te("అవు", "length").error == "truncated"


MCQ = [
    ("ANSWER: B", "B"),
    ("Let me think. The capital is Hyderabad.\nANSWER: C", "C"),
    ("Answer: (B)", "B"),
    ("answer: d", "D"),
    ("**ANSWER: A**", "A"),
    ("The answer is C.", "C"),
    ("The correct answer is (b)", "B"),
    ("Final answer: [D]", "D"),
    ("B", "B"),
    ("(C).", "C"),
    ("సమాధానం: D", "D"),
    ("సరైన సమాధానం (A)", "A"),
    ("జవాబు B", "B"),
    ("I first thought ANSWER: A, no. ANSWER: C", "C"),
    ("ANSWER: B, because the others are wrong", "B"),
]


@pytest.mark.parametrize(("text", "choice"), MCQ)
def test_mcq_answers(text: str, choice: str) -> None:
    reading = read_mcq_answer(text, answer="C")
    assert reading == McqAnswered(choice, choice == "C")


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", "empty"),
        ("I am not sure.", "no_answer"),
        ("the answer is a tricky one", "no_answer"),
        ("ANSWER: E", "not_an_option"),
        ("ANSWER: A, C", "multiple_choices"),
        ("సమాధానం: బి", "no_answer"),  # the letter written in Telugu script is not read as B
        ("ANSWER:", "no_answer"),
    ],
)
def test_mcq_format_failures_are_not_wrong_answers(text: str, error: str) -> None:
    reading = read_mcq_answer(text, answer="C")
    assert isinstance(reading, McqFormatFailure) and reading.error == error


def test_mcq_truncated_and_without_a_key() -> None:
    assert read_mcq_answer("ANSWER: B", "length") == McqFormatFailure("truncated")
    assert read_mcq_answer("ANSWER: B") == McqAnswered("B", None)
    assert read_mcq_answer("ANSWER: E", labels="ABCDE") == McqAnswered("E", None)
