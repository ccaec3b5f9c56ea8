"""The answer-parsing tables of GEMBA scores, backtranslation JSON and Retry-After headers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from service.core.judges.llm import parse_backtranslation, parse_retry_after, parse_score


@pytest.mark.parametrize(
    ("raw", "finish_reason", "score", "error"),
    [
        ("85", "stop", 85.0, None),
        ("  85\n", "stop", 85.0, None),
        ("85.", "stop", 85.0, None),
        ("85.5", "stop", 85.5, None),
        ("85.5.", "stop", 85.5, None),
        ("0", "stop", 0.0, None),
        ("100", "stop", 100.0, None),
        ("100.0", "stop", 100.0, None),
        ("085", "stop", 85.0, None),
        ("85", None, 85.0, None),  # some providers omit finish_reason
        ("101", "stop", None, "out_of_range"),
        ("100.5", "stop", None, "out_of_range"),
        ("250", "stop", None, "out_of_range"),
        ("0.55", "stop", None, "wrong_scale"),  # a 0-1 answer to a 0-100 question: recorded, never rescaled
        ("0.9", "stop", None, "wrong_scale"),
        ("0.0", "stop", 0.0, None),
        ("1", "stop", 1.0, None),
        ("1.0", "stop", 1.0, None),
        ("-5", "stop", None, "not_a_number"),
        ("+85", "stop", None, "not_a_number"),
        ("85%", "stop", None, "not_a_number"),
        ("85/100", "stop", None, "not_a_number"),
        ("Score: 85", "stop", None, "not_a_number"),
        ("85 (good)", "stop", None, "not_a_number"),
        ("**85**", "stop", None, "not_a_number"),
        ("85 90", "stop", None, "not_a_number"),
        ("85\n90", "stop", None, "not_a_number"),
        ("85..", "stop", None, "not_a_number"),
        ("85,5", "stop", None, "not_a_number"),
        (".5", "stop", None, "not_a_number"),
        ("1e2", "stop", None, "not_a_number"),
        ("nan", "stop", None, "not_a_number"),
        ("inf", "stop", None, "not_a_number"),
        ("eighty-five", "stop", None, "not_a_number"),
        ("٨٥", "stop", None, "not_a_number"),  # non-ASCII digits
        ("８５", "stop", None, "not_a_number"),  # fullwidth digits
        ("", "stop", None, "empty"),
        ("   \n", "stop", None, "empty"),
        (None, "stop", None, "empty"),
        ("8", "length", None, "truncated"),
        ("85", "length", None, "truncated"),
    ],
)
def test_parse_score_table(raw: str | None, finish_reason: str | None, score: float | None, error: str | None) -> None:
    assert parse_score(raw, finish_reason) == (score, error)


@pytest.mark.parametrize(
    ("raw", "finish_reason", "pali", "error"),
    [
        ('{"pali": "evaṃ me sutaṃ"}', "stop", "evaṃ me sutaṃ", None),
        ('```json\n{"pali": "evaṃ me sutaṃ"}\n```', "stop", "evaṃ me sutaṃ", None),
        ('Here it is: {"pali": " bhikkhu "} hope this helps', "stop", "bhikkhu", None),
        ('{broken {"pali": "dhamma"}', "stop", "dhamma", None),
        ('{"pali": "x", "note": 1}', "stop", "x", None),
        ('{"pali": ""}', "stop", None, "empty_pali"),
        ('{"pali": 3}', "stop", None, "missing_pali"),
        ('{"translation": "dhamma"}', "stop", None, "missing_pali"),
        ("dhamma", "stop", None, "no_json_object"),
        ('{"pali": "dham', "stop", None, "no_json_object"),
        ('{"pali": "dhamma"}', "length", None, "truncated"),
        ("", "stop", None, "empty"),
        (None, "stop", None, "empty"),
    ],
)
def test_parse_backtranslation_table(raw: str | None, finish_reason: str, pali: str | None, error: str | None) -> None:
    assert parse_backtranslation(raw, finish_reason) == (pali, error)


def test_parse_retry_after() -> None:
    now = datetime(2026, 2, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(" 0.25 ") == 0.25
    assert parse_retry_after("-4") == 0.0
    assert parse_retry_after(format_datetime(now + timedelta(seconds=7), usegmt=True), now=now) == 7.0
    assert parse_retry_after(format_datetime(now - timedelta(seconds=7), usegmt=True), now=now) == 0.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after("nan") is None
