"""A candidate result's findings with their stable ids (the one place ids are made), and the checks a reviewer's word
on them (judgements of findings, error spans she added) must pass before it is stored."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Mapping, Sequence

import msgspec

from service.core.judges.llm import JudgeSpan
from service.core.types import Flag, Severity, Span
from service.core.typology import Category, ErrorSpan, FindingJudgement, category_of_rule
from service.platform.errors import InputError

__all__ = ["JUDGE_SPAN_RULE", "Finding", "check_judgements", "check_spans", "findings_of", "judge_span_detail"]

# the rule of a finding made from the judges' error spans (its category is the judges', not the rule's)
JUDGE_SPAN_RULE = "judge_span"


class Finding(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A finding shown with a review item: ``id`` is what a reviewer's judgement of it names (``rule``, and
    ``rule#2``, ``rule#3``... for a rule found again on the same candidate), ``category`` what it claims."""

    id: str
    rule: str
    severity: Severity
    category: Category
    detail: str
    spans: tuple[Span, ...] = ()

    def flag(self) -> Flag:
        """The flag it was listed from (the highlighter locates flags)."""
        return Flag(rule=self.rule, severity=self.severity, detail=self.detail, spans=self.spans)


def judge_span_detail(span: JudgeSpan) -> str:
    """A merged judge span in a reviewer's words: the quote, what the judges called it, how many agreed."""
    said = "; ".join(f"{m.judge_id}: {m.severity} {m.category}" for m in span.marks)
    return f"\u201c{span.quote}\u201d: marked by {span.agreement} of {span.n_judges} judges ({said})"


def findings_of(flags: Iterable[Flag], judge_spans: Iterable[JudgeSpan] = ()) -> list[Finding]:
    """The findings of a candidate result, in the order its flags are stored, then its judges' error spans (rule
    ``judge_span``, each with the judges' category and severity), each with its id. Ids depend only on the rules and
    their order, so the item page, the API and a verdict stored later agree on them."""
    listed = [(f.rule, f.severity, category_of_rule(f.rule), f.detail, f.spans) for f in flags] + [
        (JUDGE_SPAN_RULE, s.severity, s.category, judge_span_detail(s), (Span(s.start, s.end),)) for s in judge_spans
    ]
    seen: dict[str, int] = {}
    out = []
    for rule, severity, category, detail, spans in listed:
        seen[rule] = seen.get(rule, 0) + 1
        fid = rule if seen[rule] == 1 else f"{rule}#{seen[rule]}"
        out.append(Finding(fid, rule, severity, category, detail, spans))
    return out


def check_judgements(findings: Sequence[Finding], judgements: Sequence[FindingJudgement]) -> None:
    """InputError (422) unless each judgement names a finding of the item, once, with a severity exactly when it
    re-grades it."""
    known = {f.id for f in findings}
    named: set[str] = set()
    for j in judgements:
        if j.finding not in known:
            listed = ", ".join(sorted(known)) or "none"
            raise InputError(
                f"finding {j.finding!r} is not a finding of this item (its findings: {listed})",
                extra={"finding": j.finding},
            )
        if j.finding in named:
            raise InputError(f"finding {j.finding!r} is judged twice", extra={"finding": j.finding})
        named.add(j.finding)
        if (j.decision == "regrade") != (j.severity is not None):
            raise InputError(
                f"finding {j.finding!r}: a severity goes with decision 'regrade' and only with it",
                extra={"finding": j.finding},
            )


def check_spans(spans: Sequence[ErrorSpan], texts: Mapping[str, str] | None) -> None:
    """InputError (422) unless each span has ``start <= end`` and, when the texts are known (``texts`` by side, as
    submitted; None once the assessment has expired), lies within its text's NFC code points."""
    for k, s in enumerate(spans):
        if s.end < s.start:
            raise InputError(f"spans[{k}]: end ({s.end}) is before start ({s.start})", extra={"span": k})
        if texts is None:
            continue
        size = len(unicodedata.normalize("NFC", texts.get(s.side, "")))
        if s.end > size:
            raise InputError(f"spans[{k}]: end ({s.end}) is beyond the {s.side}'s {size} characters", extra={"span": k})
