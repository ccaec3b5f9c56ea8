"""Checks earn their forcing: each check's precision from reviewers' word on its findings, what reviewers found that
no check did, and which forcing checks to propose for demotion.

A reviewer's judgement of a finding (``typology.FindingJudgement``): ``accept`` (it holds), ``reject`` (it does not),
``regrade`` (it holds at another severity). Per check:

| figure              | numerator                                     | denominator      |
|---------------------|-----------------------------------------------|------------------|
| precision           | accept + regrade (the error is there)         | judged findings  |
| forcing precision   | accept, or regrade to a forcing severity       | judged findings shown at a forcing severity |

with 95% Wilson intervals (``metrics.wilson_interval``, SciPy's). Reviewer-side recall per category: findings that
held (accept + regrade) over those plus the spans reviewers added (errors no finding named), Wilson too. A check the
active model forces whose forcing precision falls below ``min_precision`` on at least ``min_judged`` judged findings
is proposed for demotion from forcing to a score term.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from service.core.findings import Finding, findings_of
from service.core.metrics import wilson_interval
from service.core.ranking import HardFlagRule
from service.core.types import Flag, Severity
from service.core.typology import CATEGORIES, RULE_CATEGORY, Category, Decision, ErrorSpan, SpanSeverity
from service.state.durable import Verdict, in_force

__all__ = [
    "JudgedFinding",
    "check_precision",
    "demotion_proposals",
    "judged_findings",
    "reviewer_recall",
    "without_forcing",
]


@dataclass(frozen=True)
class JudgedFinding:
    """One reviewer's word on one finding: the check that raised it, its category and the severity it was shown at,
    the risk model (rule) that scored the item, and the decision (with the new severity of a regrade)."""

    check: str
    category: Category
    shown: Severity
    model: str | None
    decision: Decision
    regraded_to: SpanSeverity | None = None

    @property
    def holds(self) -> bool:
        return self.decision != "reject"

    def earns_forcing(self, forcing: Sequence[str]) -> bool:
        """It holds at a severity the model forces (a regrade down to minor does not earn a place at the top)."""
        if self.decision == "accept":
            return True
        return self.decision == "regrade" and self.regraded_to in forcing


def _findings(snapshot: dict[str, Any]) -> dict[str, Finding]:
    flags = []
    for f in snapshot.get("flags") or []:
        try:
            flags.append(msgspec.convert(f, Flag))
        except msgspec.ValidationError:  # read leniently, as labels.LabelledItem reads snapshots
            continue
    return {f.id: f for f in findings_of(flags)}


def judged_findings(verdicts: Sequence[Verdict]) -> tuple[list[JudgedFinding], list[ErrorSpan]]:
    """Every judgement of a finding and every span added in the verdicts that count (``durable.in_force``); a
    finding is named by the id ``findings.findings_of`` gave it in the item's snapshot (the verdict route checked
    it). Judge span findings, which carry no flag, are left out until the snapshot lists them."""
    judged: list[JudgedFinding] = []
    added: list[ErrorSpan] = []
    for v in in_force(verdicts):
        shown = _findings(v.snapshot) if v.findings else {}
        risk = v.snapshot.get("risk")
        model = risk.get("rule") if isinstance(risk, dict) and isinstance(risk.get("rule"), str) else None
        for j in v.findings:
            f = shown.get(j.finding)
            if f is not None:
                judged.append(JudgedFinding(f.rule, f.category, f.severity, model, j.decision, j.severity))
        added.extend(v.spans)
    return judged, added


def _share(k: int, n: int) -> dict[str, Any]:
    low, high = wilson_interval(k, n)
    return {
        "value": round(k / n, 6) if n else None,
        "ci": [round(low, 6), round(high, 6)] if n else None,
        "k": k,
        "n": n,
    }


def _row(check: str, model: str | None, rows: Sequence[JudgedFinding], forcing: Sequence[str]) -> dict[str, Any]:
    at_forcing = [r for r in rows if r.shown in forcing]
    return {
        "check": check,
        "category": rows[0].category,
        "model": model,
        "judged": len(rows),
        "accepted": sum(r.decision == "accept" for r in rows),
        "rejected": sum(r.decision == "reject" for r in rows),
        "regraded": sum(r.decision == "regrade" for r in rows),
        "precision": _share(sum(r.holds for r in rows), len(rows)),
        "forcing_precision": _share(sum(r.earns_forcing(forcing) for r in at_forcing), len(at_forcing)),
    }


def check_precision(
    judged: Iterable[JudgedFinding], forcing: Sequence[str] = ("critical", "major")
) -> list[dict[str, Any]]:
    """Per check over every model (``model`` None) and per check and risk model: counts, precision, forcing
    precision (``forcing``: the severities a model forces), sorted by check then model."""
    by_check: dict[str, list[JudgedFinding]] = {}
    by_model: dict[tuple[str, str], list[JudgedFinding]] = {}
    for r in judged:
        by_check.setdefault(r.check, []).append(r)
        if r.model is not None:
            by_model.setdefault((r.check, r.model), []).append(r)
    out = [_row(c, None, rows, forcing) for c, rows in by_check.items()]
    out += [_row(c, m, rows, forcing) for (c, m), rows in by_model.items()]
    return sorted(out, key=lambda row: (row["check"], row["model"] or ""))


def reviewer_recall(judged: Iterable[JudgedFinding], added: Iterable[ErrorSpan]) -> list[dict[str, Any]]:
    """Per category (the typology's order): findings that held, spans reviewers added that no finding named, and
    recall seen from the reviewers' side, held / (held + added)."""
    held: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
    missed: dict[str, int] = dict.fromkeys(CATEGORIES, 0)
    seen: set[str] = set()
    for r in judged:
        held[r.category] += r.holds
        seen.add(r.category)
    for s in added:
        missed[s.category] += 1
    return [
        {
            "category": c,
            "found": held[c],
            "added_by_reviewers": missed[c],
            "recall": _share(held[c], held[c] + missed[c]),
        }
        for c in CATEGORIES
        if c in seen or missed[c]
    ]


def demotion_proposals(
    precision: Sequence[dict[str, Any]], rule: HardFlagRule, *, min_precision: float, min_judged: int
) -> list[dict[str, Any]]:
    """Checks ``rule`` forces whose forcing precision (pooled over models) is below ``min_precision`` on at least
    ``min_judged`` judged findings, each with the figures it rests on."""
    out = []
    for row in precision:
        fp = row["forcing_precision"]
        if row["model"] is not None or fp["n"] < min_judged or fp["value"] is None:
            continue
        if not any(rule.forces(row["check"], sev) for sev in rule.severities) or fp["value"] >= min_precision:
            continue
        out.append(
            {
                "check": row["check"],
                "category": row["category"],
                "forcing_precision": fp,
                "reason": (
                    f"{fp['k']} of {fp['n']} judged findings earned their forcing ({fp['value']:.2f} < "
                    f"{min_precision:g}, at least {min_judged} judged)"
                ),
            }
        )
    return out


def without_forcing(rule: HardFlagRule, checks: Sequence[str]) -> HardFlagRule:
    """``rule`` with ``checks`` no longer forcing; a rule that forces any check (``rules`` None) is first spelled out
    as every check the typology knows."""
    if not checks:
        return rule
    listed = rule.rules if rule.rules is not None else list(RULE_CATEGORY)
    return HardFlagRule(rule.force_to_top, list(rule.severities), [r for r in listed if r not in checks])


def checks_report(
    verdicts: Sequence[Verdict], rule: HardFlagRule, *, min_precision: float, min_judged: int
) -> dict[str, Any]:
    """The calibration report's part on checks: precision per check (and per risk model), reviewer-side recall per
    category and the demotions proposed against ``rule`` (the active model's forcing choices)."""
    judged, added = judged_findings(verdicts)
    precision = check_precision(judged, rule.severities)
    return {
        "judged_findings": len(judged),
        "added_spans": len(added),
        "precision": precision,
        "reviewer_recall": reviewer_recall(judged, added),
        "demotion_rule": {"below_precision": min_precision, "min_judged": min_judged},
        "demotions": demotion_proposals(precision, rule, min_precision=min_precision, min_judged=min_judged),
    }
