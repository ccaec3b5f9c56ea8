r"""Strict reading of MATA answers: a judge's grade (English or Telugu) and a model's multiple-choice answer.

English grade (markup ``*``, ``_`` and backticks dropped first; "GRADE" in any case; the letter a whole token):

| answer                                                   | result                                        |
|----------------------------------------------------------|-----------------------------------------------|
| ... ``GRADE: C`` / ``grade: i`` / ``**GRADE: C**``        | correct / incorrect (the last GRADE wins)     |
| ... ``GRADE: P`` with partial credit on                  | partial                                       |
| ... ``GRADE: P`` with partial credit off                 | ``partial_not_enabled``                       |
| a last ``GRADE: <other single letter>``                  | ``unknown_grade``                             |
| no ``GRADE: <letter>`` ("GRADE: Correct", prose only)     | ``no_grade``                                  |
| ``GRADE: C if ...`` (the instruction line copied back)    | not a grade: skipped (``no_grade`` if alone)  |

Telugu grade: the answer's whole words (``script_words``: Telugu vowel signs kept inside words):

| words                                              | result                                              |
|----------------------------------------------------|-----------------------------------------------------|
| అవును or yes (any case), and no "no" word          | correct                                             |
| లేదు or no, and no "yes" word                      | incorrect                                           |
| both                                               | ``both_yes_and_no``                                 |
| neither (e.g. "అవునండి", "కాదు", "సరైనది")          | ``neither_yes_nor_no``                              |

Protocol ``paper``: Inspect's readings verbatim (inspect_ai 0.3.90). Grade: the first match of
``(?i)GRADE\s*:\s*([CPI])(.*)$`` (in effect a GRADE on the answer's last line), and no match counts as
``incorrect`` (``counted_as`` says so: it was not read). Multiple choice: the first line matching
``(?i)^ANSWER\s*:\s*([A-Za-z ,]+)\s*(?:$|\n)`` (multiline), else the first ``(?i)ANSWER\s*:\s*([A-Za-z ,]+)``;
the option letters in it are the choice (more than one: ``multiple_choices``, wrong as in Inspect).

Either way an empty answer is ``empty`` and a cut-off one (finish_reason "length") ``truncated``: a format
failure of its own, never a wrong answer.

Multiple-choice answer (markup dropped): the last ``ANSWER: X`` / ``Answer: (B)`` / ``answer: b`` / "the answer
is C" (after "is" the letter must be upper case or bracketed, so "the answer is a ..." reads nothing) / Telugu
"సమాధానం: B", "జవాబు (C)", "సరైన సమాధానం B"; failing those, a bare letter ("B", "(B)", "B."). The letter must
be one of the item's labels (``not_an_option`` otherwise); "ANSWER: A, C" is ``multiple_choices``; nothing of
the kind is ``no_answer``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import msgspec

from service.core.judges.llm import readable
from service.core.text import script_words

__all__ = [
    "GradeError",
    "GradeParse",
    "McqAnswered",
    "McqError",
    "McqFormatFailure",
    "McqReading",
    "Verdict",
    "parse_grade",
    "parse_grade_en",
    "parse_grade_inspect",
    "parse_grade_te",
    "read_mcq_answer",
]

Verdict = Literal["correct", "incorrect", "partial"]
GradeError = Literal[
    "empty",
    "truncated",
    "no_grade",
    "unknown_grade",
    "partial_not_enabled",
    "both_yes_and_no",
    "neither_yes_nor_no",
]
McqError = Literal["empty", "truncated", "no_answer", "not_an_option", "multiple_choices"]


class GradeParse(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A verdict (``error`` None) or a format failure; ``reasoning`` is the text before the English grade line.
    ``counted_as``: a verdict the protocol's rule gave to an answer it could not read (paper: no GRADE = incorrect)."""

    verdict: Verdict | None
    error: GradeError | None
    reasoning: str | None = None
    counted_as: str | None = None


Protocol = Literal["trisk", "paper"]
_INSPECT_GRADE = re.compile(r"(?i)GRADE\s*:\s*([CPI])(.*)$")
_INSPECT_ANSWER_STRICT = re.compile(r"(?i)^ANSWER\s*:\s*([A-Za-z ,]+)\s*(?:$|\n)", re.MULTILINE)
_INSPECT_ANSWER = re.compile(r"(?i)ANSWER\s*:\s*([A-Za-z ,]+)(?:[^\w]|\n|$)")


def parse_grade_inspect(text: str | None, finish_reason: str | None = "stop") -> GradeParse:
    """Inspect's model_graded_fact reading (see the module docstring); a cut-off or empty answer is still a format
    failure of its own here, never a verdict."""
    text, error = readable(text, finish_reason)
    if text is None:
        return GradeParse(None, error)
    match = _INSPECT_GRADE.search(text)
    if match is None:
        return GradeParse("incorrect", None, None, "no GRADE line: incorrect (Inspect's rule)")
    reasoning = text[: match.start()].strip() or None
    return GradeParse(_LETTER_VERDICT[match.group(1).upper()], None, reasoning)


_MARKUP = re.compile(r"[*_`]")
_GRADE = re.compile(r"(?<![A-Za-z0-9])grade\s*[:：]\s*[\[(]?\s*([A-Za-z])\s*[\])]?(?![A-Za-z0-9])", re.IGNORECASE)
_ECHO = re.compile(r"\s+if\b", re.IGNORECASE)
_LETTER_VERDICT: dict[str, Verdict] = {"C": "correct", "I": "incorrect", "P": "partial"}


def parse_grade_en(text: str | None, finish_reason: str | None = "stop", *, partial_credit: bool = False) -> GradeParse:
    """The English judge's verdict; see the table in the module docstring."""
    text, error = readable(text, finish_reason)
    if text is None:
        return GradeParse(None, error)
    clean = _MARKUP.sub("", text)
    # "GRADE: C if the submission is correct, or GRADE: I if ..." is the instruction copied back, not a grade
    matches = [m for m in _GRADE.finditer(clean) if not _ECHO.match(clean, m.end())]
    if not matches:
        return GradeParse(None, "no_grade")
    last = matches[-1]
    reasoning = clean[: last.start()].strip() or None
    verdict = _LETTER_VERDICT.get(last.group(1).upper())
    if verdict is None:
        return GradeParse(None, "unknown_grade", reasoning)
    if verdict == "partial" and not partial_credit:
        return GradeParse(None, "partial_not_enabled", reasoning)
    return GradeParse(verdict, None, reasoning)


_YES = frozenset({"అవును", "yes"})
_NO = frozenset({"లేదు", "no"})


def parse_grade_te(text: str | None, finish_reason: str | None = "stop") -> GradeParse:
    """The Telugu judge's yes/no as whole words; see the table in the module docstring."""
    text, error = readable(text, finish_reason)
    if text is None:
        return GradeParse(None, error)
    words = set(script_words(text))
    yes, no = bool(words & _YES), bool(words & _NO)
    if yes and no:
        return GradeParse(None, "both_yes_and_no")
    if not yes and not no:
        return GradeParse(None, "neither_yes_nor_no")
    return GradeParse("correct" if yes else "incorrect", None)


def parse_grade(
    text: str | None,
    finish_reason: str | None,
    *,
    language: str,
    partial_credit: bool = False,
    protocol: Protocol = "trisk",
) -> GradeParse:
    if protocol == "paper" and language == "en":
        return parse_grade_inspect(text, finish_reason)
    if language == "te":
        return parse_grade_te(text, finish_reason)
    return parse_grade_en(text, finish_reason, partial_credit=partial_credit)


# --- multiple choice -----------------------------------------------------------------------------------------------


class McqAnswered(msgspec.Struct, tag="answered", tag_field="status", forbid_unknown_fields=True, frozen=True):
    """The option the model chose; ``correct`` is None when no answer key was given."""

    choice: str
    correct: bool | None = None


class McqFormatFailure(
    msgspec.Struct, tag="format_failure", tag_field="status", forbid_unknown_fields=True, frozen=True
):
    """No readable choice: counted apart from a wrong answer."""

    error: McqError
    detail: str | None = None


McqReading = McqAnswered | McqFormatFailure

_LETTER = r"[\[(]?\s*(?P<letter>[A-Za-z])\s*[\])]?(?![A-Za-z0-9])"
_MORE = re.compile(r"\s*(?:,|&|/|\band\b|\bor\b|మరియు|లేదా)\s*[\[(]?\s*[A-Za-z](?![A-Za-z0-9])", re.IGNORECASE)
_ANSWER_STATEMENTS = (
    # "ANSWER: X", "Answer: (B)", "answer: b", "Final answer: C"
    re.compile(r"(?<![A-Za-z])answer\s*[:：]\s*" + _LETTER, re.IGNORECASE),
    # "the answer is C", "The correct answer is (b)": after "is" a capital or a bracketed letter only
    re.compile(
        r"(?<![A-Za-z])(?i:answer\s+is)\s*[:：]?\s*"
        r"(?:(?P<upper>[A-Z])(?![A-Za-z0-9])|[\[(]\s*(?P<bracketed>[A-Za-z])\s*[\])])"
    ),
    # Telugu framing: సమాధానం / జవాబు (answer), optionally సరైన (correct) before it
    re.compile(r"(?:సరైన\s*)?(?:సమాధానం|జవాబు)\s*[:：]?\s*" + _LETTER),
)
_BARE = re.compile(r"^\s*[\[(]?\s*(?P<letter>[A-Za-z])\s*[\])]?\s*[.。]?\s*$")


def _letter(match: re.Match[str]) -> str:
    groups = match.groupdict()
    for name in ("letter", "upper", "bracketed"):
        if groups.get(name):
            return groups[name]
    raise AssertionError("a statement pattern without a letter group")  # pragma: no cover


def read_mcq_answer(
    text: str | None,
    finish_reason: str | None = "stop",
    *,
    labels: Sequence[str] = ("A", "B", "C", "D"),
    answer: str | None = None,
    protocol: Protocol = "trisk",
) -> McqReading:
    """The chosen option, checked against ``answer`` (a label) when given; see the module docstring."""
    text, error = readable(text, finish_reason)
    if text is None:
        return McqFormatFailure(error or "empty")
    if protocol == "paper":
        return _read_inspect(text, labels, answer)
    clean = _MARKUP.sub("", text)
    statements: list[re.Match[str]] = []
    for pattern in _ANSWER_STATEMENTS:
        statements += pattern.finditer(clean)
    statements.sort(key=lambda m: m.start())
    if statements:
        last = statements[-1]
        if _MORE.match(clean, last.end()):
            return McqFormatFailure("multiple_choices", clean[last.start() : last.end() + 12].strip())
        letter = _letter(last).upper()
    else:
        bare = _BARE.match(clean)
        if bare is None:
            return McqFormatFailure("no_answer")
        letter = bare.group("letter").upper()
    allowed = [label.upper() for label in labels]
    if letter not in allowed:
        return McqFormatFailure("not_an_option", letter)
    return McqAnswered(letter, None if answer is None else letter == answer.upper())


def _read_inspect(text: str, labels: Sequence[str], answer: str | None) -> McqReading:
    match = _INSPECT_ANSWER_STRICT.search(text) or _INSPECT_ANSWER.search(text)
    if match is None:
        return McqFormatFailure("no_answer")
    allowed = [label.upper() for label in labels]
    letters = list(dict.fromkeys(ch.upper() for ch in match.group(1) if ch.upper() in allowed))
    if not letters:
        return McqFormatFailure("not_an_option", match.group(1).strip()[:20])
    if len(letters) > 1:
        return McqFormatFailure("multiple_choices", match.group(1).strip()[:40])
    return McqAnswered(letters[0], None if answer is None else letters[0] == answer.upper())
