"""The error typology reviewers, checks and judges share: MQM-style categories, span severities, finding judgements."""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

__all__ = [
    "CATEGORIES",
    "RULE_CATEGORY",
    "SPAN_SEVERITIES",
    "Category",
    "Decision",
    "ErrorSpan",
    "FindingJudgement",
    "SpanSeverity",
    "category_of_rule",
]

# MQM-style (Lommel et al.; the WMT MQM/ESA annotation guidelines), cut to what a reviewer of classical-text
# translations checks: the accuracy subtypes the checks look for, then fluency and style as whole categories.
Category = Literal[
    "accuracy/mistranslation",
    "accuracy/omission",
    "accuracy/addition",
    "accuracy/untranslated",
    "accuracy/number",
    "accuracy/name",
    "accuracy/negation",
    "accuracy/terminology",
    "fluency",
    "style",
]
CATEGORIES: tuple[Category, ...] = Category.__args__  # type: ignore[attr-defined]

SpanSeverity = Literal["minor", "major", "critical"]
SPAN_SEVERITIES: tuple[SpanSeverity, ...] = ("minor", "major", "critical")

# what a reviewer says of one finding the service showed her: it holds, it does not, or it holds at another severity
Decision = Literal["accept", "reject", "regrade"]

# which category a check's finding claims; a rule not named here claims no accuracy subtype ("accuracy/mistranslation")
RULE_CATEGORY: dict[str, Category] = {
    "critical.number": "accuracy/number",
    "critical.list_size": "accuracy/number",
    "critical.name": "accuracy/name",
    "critical.name_spelling": "accuracy/name",
    "critical.negation": "accuracy/negation",
    "critical.term": "accuracy/terminology",
    "critical.substitution": "accuracy/terminology",
    "critical.omission": "accuracy/omission",
    "critical.added_content": "accuracy/addition",
    "empty_output": "accuracy/omission",
    "source_copy": "accuracy/untranslated",
    "partial_source_copy": "accuracy/untranslated",
    "wrong_script": "accuracy/untranslated",
    "json_debris": "fluency",
    "prompt_echo": "accuracy/addition",
    "repetition_loop": "fluency",
    "unbalanced_brackets": "fluency",
}


def category_of_rule(rule: str) -> Category:
    """The category a finding of ``rule`` claims (judge span findings carry their own category instead)."""
    return RULE_CATEGORY.get(rule, "accuracy/mistranslation")


class FindingJudgement(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A reviewer's word on one finding shown with the item: ``finding`` is the finding's id as the item lists it
    (a flag's ``rule``, e.g. ``critical.number``, or a judge span's id); ``severity`` is required for ``regrade``."""

    finding: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
    decision: Decision
    severity: SpanSeverity | None = None


class ErrorSpan(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """An error a reviewer marked herself: character offsets ``[start, end)`` into the candidate (or the source) as
    submitted, NFC code points like ``types.Span``; ``start == end`` marks where something is missing."""

    side: Literal["candidate", "source"]
    start: Annotated[int, msgspec.Meta(ge=0)]
    end: Annotated[int, msgspec.Meta(ge=0)]
    severity: SpanSeverity
    category: Category
    note: Annotated[str, msgspec.Meta(max_length=2_000)] | None = None
