"""Per-check precision, reviewer-side recall, demotion proposals and reviewer agreement against hand-computed tables."""

from __future__ import annotations

import math

import pytest

from service.core.ranking import HardFlagRule
from service.core.typology import ErrorSpan
from service.review.calibration.agreement import reviewer_agreement
from service.review.calibration.checks import JudgedFinding, check_precision, demotion_proposals, reviewer_recall
from service.state.durable import Label, Verdict

Z = 1.959963984540054


def wilson(k: int, n: int) -> list[float]:
    """The Wilson score interval written out (no library), to check the library's against."""
    p = k / n
    centre = (p + Z * Z / (2 * n)) / (1 + Z * Z / n)
    half = Z * math.sqrt(p * (1 - p) / n + Z * Z / (4 * n * n)) / (1 + Z * Z / n)
    return [centre - half, centre + half]


def jf(check: str, decision: str, model: str = "m1", to: str | None = None, shown: str = "major") -> JudgedFinding:
    category = {"critical.number": "accuracy/number", "critical.name": "accuracy/name"}.get(check, "accuracy/number")
    return JudgedFinding(check, category, shown, model, decision, to)  # type: ignore[arg-type]


# critical.number: 5 judged at major (3 under m1, 2 under m2): accept, accept, reject, regrade->minor, regrade->major
#   precision 4/5 (a regrade holds), forcing precision 3/5 (a regrade down to minor does not earn the top)
# critical.name: 1 rejected; critical.list_size: 2 rejected, shown at minor (never forcing-judged)
JUDGED = [
    jf("critical.number", "accept"),
    jf("critical.number", "accept"),
    jf("critical.number", "reject"),
    jf("critical.number", "regrade", "m2", "minor"),
    jf("critical.number", "regrade", "m2", "major"),
    jf("critical.name", "reject"),
    jf("critical.list_size", "reject", shown="minor"),
    jf("critical.list_size", "reject", shown="minor"),
]


def _row(rows: list[dict], check: str, model: str | None) -> dict:
    return next(r for r in rows if r["check"] == check and r["model"] == model)


def test_check_precision_against_hand_table() -> None:
    rows = check_precision(JUDGED)
    number = _row(rows, "critical.number", None)
    assert (number["judged"], number["accepted"], number["rejected"], number["regraded"]) == (5, 2, 1, 2)
    assert number["precision"]["value"] == pytest.approx(0.8)
    assert number["precision"]["ci"] == pytest.approx(wilson(4, 5), abs=1e-6)
    assert number["forcing_precision"]["value"] == pytest.approx(0.6)
    assert number["forcing_precision"]["ci"] == pytest.approx([0.230724, 0.882379], abs=1e-5)  # by hand
    assert number["forcing_precision"]["ci"] == pytest.approx(wilson(3, 5), abs=1e-6)
    m1, m2 = _row(rows, "critical.number", "m1"), _row(rows, "critical.number", "m2")
    assert (m1["precision"]["k"], m1["precision"]["n"]) == (2, 3)
    assert (m2["precision"]["k"], m2["forcing_precision"]["k"], m2["forcing_precision"]["n"]) == (2, 1, 2)
    listed = _row(rows, "critical.list_size", None)
    assert listed["precision"]["value"] == 0.0 and listed["forcing_precision"] == {
        "value": None,
        "ci": None,
        "k": 0,
        "n": 0,
    }


def test_reviewer_recall_per_category() -> None:
    added = [
        ErrorSpan("candidate", 0, 4, "major", "accuracy/number"),
        ErrorSpan("candidate", 5, 9, "minor", "accuracy/number"),
        ErrorSpan("source", 3, 3, "major", "accuracy/omission"),
    ]
    rows = {r["category"]: r for r in reviewer_recall(JUDGED, added)}
    # number: 4 held (list_size rows are number findings too but were rejected) + 2 added
    assert (rows["accuracy/number"]["found"], rows["accuracy/number"]["added_by_reviewers"]) == (4, 2)
    assert rows["accuracy/number"]["recall"]["value"] == pytest.approx(4 / 6)
    assert rows["accuracy/number"]["recall"]["ci"] == pytest.approx(wilson(4, 6), abs=1e-6)
    assert rows["accuracy/name"]["recall"] == {"value": None, "ci": None, "k": 0, "n": 0}
    assert rows["accuracy/omission"]["recall"]["value"] == 0.0
    assert list(rows) == ["accuracy/omission", "accuracy/number", "accuracy/name"]  # the typology's order


def test_demotion_only_of_forcing_checks_below_the_bar_with_enough_judged() -> None:
    rows = check_precision(JUDGED)
    rule = HardFlagRule(rules=["critical.number", "critical.name"])
    proposed = demotion_proposals(rows, rule, min_precision=0.7, min_judged=5)
    assert [p["check"] for p in proposed] == ["critical.number"]
    assert "3 of 5" in proposed[0]["reason"]
    assert demotion_proposals(rows, rule, min_precision=0.7, min_judged=6) == []  # too few judged
    assert demotion_proposals(rows, rule, min_precision=0.6, min_judged=5) == []  # 0.6 is not below 0.6
    # critical.name has 1 judged (0 earned), list_size is not forced: neither proposed at min_judged 1 but name
    proposed = demotion_proposals(rows, rule, min_precision=0.7, min_judged=1)
    assert [p["check"] for p in proposed] == ["critical.name", "critical.number"]
    assert demotion_proposals(rows, HardFlagRule(force_to_top=False), min_precision=0.7, min_judged=1) == []


def verdict(i: int, item: str, reviewer: str, label: Label) -> Verdict:
    return Verdict(i, "t", item, "a", "c", reviewer, label, None, None, None, float(i), {})


# items 1-6, reviewers A and B; A first said MAJOR on item 2, then corrected it to VALID (the latest counts)
A = ["VALID", "VALID", "MAJOR", "MAJOR", "MINOR", "VALID"]
B = ["VALID", "MAJOR", "MAJOR", "MAJOR", "MINOR", "VALID"]
VERDICTS = [verdict(0, "i2", "A", "MAJOR")]
VERDICTS += [verdict(10 + k, f"i{k + 1}", "A", lab) for k, lab in enumerate(A)]  # type: ignore[arg-type]
VERDICTS += [verdict(20 + k, f"i{k + 1}", "B", lab) for k, lab in enumerate(B)]  # type: ignore[arg-type]


def test_kappa_and_alpha_of_two_reviewers_against_hand_table() -> None:
    rep = reviewer_agreement(VERDICTS)
    (pair,) = rep["pairs"]
    # p_o 5/6; marginals A V3 M2 m1, B V2 M3 m1 -> p_e 13/36; kappa (30-13)/(36-13) = 17/23
    assert (pair["a"], pair["b"], pair["n"]) == ("A", "B", 6)
    assert pair["kappa"] == pytest.approx(17 / 23, abs=1e-6)
    assert pair["exact_agreement"] == pytest.approx(5 / 6, abs=1e-6)
    ci = pair["ci"]
    assert ci["low"] <= pair["kappa"] <= ci["high"] and ci["confidence"] == 0.95
    # coincidences: n = 12 values, V5 M5 m2; one disagreeing unit adds 2 off the diagonal
    # alpha = 1 - (n - 1) * 2 / (144 - 25 - 25 - 4) = 1 - 22/90
    assert rep["alpha"]["value"] == pytest.approx(68 / 90, abs=1e-6)
    assert rep["alpha"]["n_items"] == 6 and rep["alpha"]["ci"] is not None


def test_third_reviewer_with_missing_items() -> None:
    # C judged items 1 and 2 only: V, M
    rep = reviewer_agreement([*VERDICTS, verdict(30, "i1", "C", "VALID"), verdict(31, "i2", "C", "MAJOR")])
    pairs = {(p["a"], p["b"]): p for p in rep["pairs"]}
    assert pairs[("A", "C")]["n"] == 2 and pairs[("A", "C")]["kappa"] == pytest.approx(0.0)  # p_o .5 = p_e .5
    assert pairs[("B", "C")]["kappa"] == pytest.approx(1.0)
    # item 1 (V,V,V) adds 3 on the diagonal; item 2 (V,M,M) adds 2 off it; n = 14, V6 M6 m2
    # alpha = 1 - 13 * 2 / (196 - 36 - 36 - 4) = 1 - 26/120
    assert rep["alpha"]["value"] == pytest.approx(94 / 120, abs=1e-6)


def test_agreement_refuses_without_overlap() -> None:
    rep = reviewer_agreement([verdict(1, "i1", "A", "VALID"), verdict(2, "i2", "B", "MAJOR")])
    assert rep["pairs"][0]["kappa"] is None and "no item" in rep["pairs"][0]["refused"]
    assert rep["alpha"]["value"] is None and rep["alpha"]["refused"]


def test_judged_findings_from_verdicts_by_finding_id() -> None:
    from service.core.typology import FindingJudgement
    from service.review.calibration.checks import judged_findings

    flag = {"rule": "critical.number", "severity": "major", "detail": "d", "spans": []}
    snap = {"flags": [flag, flag, {**flag, "rule": "critical.name"}], "risk": {"rule": "m@1"}}
    span = ErrorSpan("candidate", 1, 2, "minor", "fluency")
    first = verdict(1, "i1", "A", "MAJOR")
    first.snapshot, first.findings = snap, (FindingJudgement("critical.number", "accept"),)
    # her correction replaces it: the second number finding (id critical.number#2) rejected, the name re-graded
    second = verdict(2, "i1", "A", "MAJOR")
    second.snapshot, second.supersedes, second.spans = snap, 1, (span,)
    second.findings = (
        FindingJudgement("critical.number#2", "reject"),
        FindingJudgement("critical.name", "regrade", "minor"),
    )
    judged, added = judged_findings([first, second])
    assert [(j.check, j.decision, j.regraded_to, j.model) for j in judged] == [
        ("critical.number", "reject", None, "m@1"),
        ("critical.name", "regrade", "minor", "m@1"),
    ]
    assert judged[1].category == "accuracy/name" and added == [span]


def test_human_labels_count_a_reviewers_correction_not_what_it_replaced() -> None:
    from types import SimpleNamespace

    from service.review.calibration import human_items

    said = verdict(1, "i1", "A", "MAJOR")
    fixed = verdict(2, "i1", "A", "VALID")
    fixed.supersedes = 1
    for v in (said, fixed):
        v.snapshot = {"passage": "mn1:1"}
    db = SimpleNamespace(verdicts=lambda tenant: [said, fixed])
    items, n = human_items(db, "t")  # type: ignore[arg-type]
    # counting the replaced verdict too, MAJOR and VALID would tie and the tie would go to MAJOR
    assert [(it.label, it.n_labels) for it in items] == [("VALID", 1)] and n == 1
