"""A candidate result's findings get stable ids (one place), and a reviewer's word on them is checked against them."""

from __future__ import annotations

import pytest

from service.core.findings import check_judgements, check_spans, findings_of
from service.core.types import Flag, Span
from service.core.typology import ErrorSpan, FindingJudgement
from service.platform.errors import InputError

FLAGS = [
    Flag(rule="critical.name", severity="major", detail="Rathapal", spans=(Span(start=0, end=8),)),
    Flag(rule="critical.list_size", severity="major", detail="six"),
    Flag(rule="critical.name", severity="minor", detail="Sariputta"),
]


def test_ids_are_the_rule_then_numbered_for_a_rule_found_again() -> None:
    found = findings_of(FLAGS)
    assert [f.id for f in found] == ["critical.name", "critical.list_size", "critical.name#2"]
    assert [f.category for f in found] == ["accuracy/name", "accuracy/number", "accuracy/name"]
    assert found[0].flag() == FLAGS[0]  # nothing of the flag is lost
    assert [f.id for f in findings_of(FLAGS)] == [f.id for f in found]  # the same every time
    assert findings_of([]) == []


@pytest.mark.parametrize(
    ("judged", "words"),
    [
        ([FindingJudgement("critical.number", "accept")], "not a finding of this item"),
        ([FindingJudgement("critical.name", "accept"), FindingJudgement("critical.name", "reject")], "judged twice"),
        ([FindingJudgement("critical.name", "regrade")], "a severity goes with decision 'regrade'"),
        ([FindingJudgement("critical.name", "accept", "minor")], "a severity goes with decision 'regrade'"),
    ],
    ids=["unknown", "twice", "regrade-without-severity", "severity-without-regrade"],
)
def test_a_judgement_that_does_not_fit_the_findings_is_refused(judged: list[FindingJudgement], words: str) -> None:
    with pytest.raises(InputError, match=words):
        check_judgements(findings_of(FLAGS), judged)


def test_judgements_of_listed_findings_pass() -> None:
    check_judgements(
        findings_of(FLAGS),
        [
            FindingJudgement("critical.name", "reject"),
            FindingJudgement("critical.name#2", "regrade", "major"),
            FindingJudgement("critical.list_size", "accept"),
        ],
    )


def test_spans_lie_within_their_texts() -> None:
    texts = {"candidate": "Rat\u0323hapāla went", "source": "Raṭṭhapālo"}  # a decomposed ṭ counts once in NFC
    check_spans([ErrorSpan("candidate", 0, 14, "minor", "accuracy/name")], texts)
    with pytest.raises(InputError, match="beyond the candidate's 14 characters"):
        check_spans([ErrorSpan("candidate", 0, 15, "minor", "accuracy/name")], texts)
    with pytest.raises(InputError, match="before start"):
        check_spans([ErrorSpan("source", 5, 4, "minor", "accuracy/name")], None)
    check_spans([ErrorSpan("source", 3, 3, "major", "accuracy/omission")], None)  # unknown texts: order only
