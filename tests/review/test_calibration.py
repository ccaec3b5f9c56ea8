"""Report figures against a hand-computed table, refusals, judge agreement, grouped folds and fit selection."""

from __future__ import annotations

import random

import numpy as np
import pytest

from service.core.risk import HardFlagRule
from service.core.types import Flag, SignalValue
from service.platform.errors import InputError
from service.review.calibration import LabelledItem, calibration_report, fit_risk_model, grouped_folds, search
from service.review.calibration import fit as fit_module
from tests.review.support import labelled

# ten items, signal s = 10..1, labels by hand; judge j1 says error (<= 70) on items 0, 2, 3, 4
LABELS = ["MAJOR", "VALID", "MAJOR", "MINOR", "VALID", "VALID", "MINOR", "VALID", "VALID", "VALID"]
J1 = [50.0, 90.0, 60.0, 65.0, 70.0, 80.0, 75.0, 85.0, 95.0, 88.0]
ITEMS = [
    labelled(lab, {"s": float(10 - i)}, passage=f"p{i}", n=i, judges={"j1": J1[i], "j2": J1[i] + 1.0})
    for i, lab in enumerate(LABELS)
]
REPORT = calibration_report(ITEMS, tenant="t", source="human", n_labels=10, model=None)
SIGNAL = next(s for s in REPORT["scores"] if s["name"] == "signal:s")


@pytest.mark.parametrize(
    ("target", "expected", "n_pos", "n_neg"),
    [
        ("major_vs_nonmajor", 15 / 16, 2, 8),  # item 2 loses only to item 1
        ("major_vs_valid", 11 / 12, 2, 6),
        ("error_vs_valid", 19 / 24, 4, 6),  # 6 + 5 + 5 + 3 wins of 24 pairs
    ],
)
def test_auc_against_hand_table(target: str, expected: float, n_pos: int, n_neg: int) -> None:
    fig = SIGNAL["auc"][target]
    assert fig["value"] == pytest.approx(expected, abs=1e-6)
    assert (fig["n_pos"], fig["n_neg"]) == (n_pos, n_neg)


@pytest.mark.parametrize(
    ("budget", "reviewed", "recall", "precision", "recall_ci"),
    [
        (0.01, 1, 0.5, 1.0, (0.094531, 0.905469)),
        (0.05, 1, 0.5, 1.0, (0.094531, 0.905469)),
        (0.10, 1, 0.5, 1.0, (0.094531, 0.905469)),
        (0.20, 2, 0.5, 0.5, (0.094531, 0.905469)),  # items 0 (MAJOR) and 1 (VALID)
    ],
)
def test_budget_figures_against_hand_table(
    budget: float, reviewed: int, recall: float, precision: float, recall_ci: tuple[float, float]
) -> None:
    row = next(r for r in SIGNAL["budgets"]["major"] if r["budget"] == budget)
    assert row["reviewed"] == reviewed and row["positives"] == 2
    assert row["recall"] == pytest.approx(recall, abs=1e-6)
    assert row["precision"] == pytest.approx(precision, abs=1e-6)
    assert row["recall_ci"] == pytest.approx(list(recall_ci), abs=1e-5)


def test_counts_judges_and_overlap() -> None:
    assert REPORT["labels"] == {
        "items": 10,
        "labels": 10,
        "VALID": 6,
        "MINOR": 2,
        "MAJOR": 2,
        "items_with_several_labels": 0,
    }
    j1 = next(j for j in REPORT["judges"]["agreement_with_labels"] if j["judge"] == "j1")
    # table: both error 3, judge only 1, label only 1, both valid 5 -> p_o .8, p_e .52
    assert j1["kappa"] == pytest.approx((0.8 - 0.52) / 0.48, abs=1e-6) and j1["n"] == 10
    pair = REPORT["judges"]["between_judges"][0]
    assert (pair["a"], pair["b"], pair["spearman"]) == ("j1", "j2", pytest.approx(1.0))
    ov = next(p for p in REPORT["overlap"]["pairs"] if {p["a"], p["b"]} == {"stored_risk", "signal:s"})
    assert ov["both"] + ov["only_a"] + ov["only_b"] + ov["neither"] == ov["positives"] == 2


def test_refuses_figures_without_both_classes() -> None:
    items = [labelled("VALID", {"s": float(i)}, passage=f"p{i}", n=i) for i in range(12)]
    rep = calibration_report(items, tenant="t", source="human", n_labels=12, model=None)
    assert rep["labels"]["items"] == 12 and "12 labelled items" in rep["notes"][0]
    sig = next(s for s in rep["scores"] if s["name"] == "signal:s")
    for fig in sig["auc"].values():
        assert fig["value"] is None and "needs both classes" in fig["refused"] and fig["n"] == 12
    assert all(r["recall"] is None and "refused" in r for r in sig["budgets"]["major"])


def test_grouped_folds_never_split_a_passage() -> None:
    rng = random.Random(3)
    groups = [f"p{rng.randrange(40)}" for _ in range(300)]
    folds = grouped_folds(groups, 5)
    assert set(folds.tolist()) == {0, 1, 2, 3, 4}
    for g in set(groups):
        assert len({int(folds[i]) for i, x in enumerate(groups) if x == g}) == 1


def _dataset(n_passages: int, seed: int = 1) -> list[LabelledItem]:
    rng = random.Random(seed)
    items = []
    for p in range(n_passages):
        for _k in range(3):
            lab = rng.choice(["MAJOR", "VALID", "VALID", "MINOR"])
            good = {"MAJOR": 2.0, "MINOR": 0.4, "VALID": 0.0}[lab] + rng.gauss(0, 0.5)
            items.append(labelled(lab, {"good": good, "noise": rng.gauss(0, 1)}, passage=f"mn{p}", n=len(items)))
    return items


def test_fit_selects_the_informative_signal() -> None:
    model, fit = fit_risk_model(_dataset(30), tenant="t", source="human", name="calibrated-t-v1", n_folds=5)
    assert model.signals[0].name == "good" and model.fit["tenant"] == "t"
    assert max(model.signals, key=lambda s: s.weight).name == "good"
    assert fit["cv"]["recall@20%"] is not None and fit["cv"]["auc"] > 0.7
    assert fit["nested_cv"]["auc"] > 0.7 and len(fit["nested_cv_terms"]) == 5
    assert (fit["n_items"], fit["n_passages"], fit["signals_considered"]) == (90, 30, ["good", "noise"])
    assert model.reference is not None and len(model.reference.quantiles) == 1001
    assert np.isfinite([s.sd for s in model.signals]).all()


def test_fit_folds_are_grouped_by_passage(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[np.ndarray] = []

    def spy(groups: np.ndarray, n_folds: int, seed: int) -> np.ndarray:
        out = search.grouped_folds(groups, n_folds, seed)
        seen.append(out)
        return out

    monkeypatch.setattr(fit_module, "grouped_folds", spy)
    items = _dataset(20)
    fit_risk_model(items, tenant="t", source="human", name="x", n_folds=4)
    (folds,) = seen
    assert set(folds.tolist()) == {0, 1, 2, 3}
    by_passage: dict[str, set[int]] = {}
    for it, k in zip(items, folds.tolist(), strict=True):
        by_passage.setdefault(it.passage, set()).add(k)
    assert len(by_passage) == 20 and all(len(ks) == 1 for ks in by_passage.values())


@pytest.mark.parametrize(
    ("labels", "n_passages", "shortfalls", "have"),
    [
        (
            ["MAJOR"] + ["VALID"] * 5,
            2,
            "6 items (need 10), 1 majors (need 2), 2 passages (need 5)",
            {"items": 6, "majors": 1, "non_majors": 5, "passages": 2},
        ),
        (
            ["MAJOR"] * 11 + ["MINOR"],
            12,
            "1 non-majors (need 2)",
            {"items": 12, "majors": 11, "non_majors": 1, "passages": 12},
        ),
    ],
)
def test_fit_refuses_too_few_labels_with_the_numbers(
    labels: list[str], n_passages: int, shortfalls: str, have: dict[str, int]
) -> None:
    items = [labelled(lab, {"s": float(i)}, passage=f"p{i % n_passages}", n=i) for i, lab in enumerate(labels)]
    with pytest.raises(InputError) as exc:
        fit_risk_model(items, tenant="t", source="human", name="x", min_items=10, min_majors=2, n_folds=5)
    assert exc.value.detail == f"too few human labels to fit a risk model: {shortfalls}"
    assert exc.value.extra == {"needed": {"items": 10, "majors": 2, "non_majors": 2, "passages": 5}, "have": have}


def test_fit_restricted_to_named_signals() -> None:
    model, fit = fit_risk_model(_dataset(30), tenant="t", source="human", name="x", signals=["noise"])
    assert [s.name for s in model.signals] == ["noise"] and fit["signals_considered"] == ["noise"]
    with pytest.raises(InputError) as exc:
        fit_risk_model(_dataset(30), tenant="t", source="human", name="x", signals=["good", "absent"])
    assert "['absent']" in exc.value.detail and exc.value.extra == {"available": ["good", "noise"]}


def test_fit_ranks_forced_items_first_as_the_model_will() -> None:
    items = _dataset(30)
    # six VALID items with the lowest signal but a critical hard flag: the fitted model forces them to the top
    for k, it in enumerate(i for i in items if i.label == "VALID"):
        if k == 6:
            break
        it.signals["good"] = SignalValue(value=-3.0)
        it.flags = [Flag(rule="source_copy", severity="critical", detail="copied")]
    model, fit = fit_risk_model(items, tenant="t", source="human", name="x")
    assert model.hard_flags == HardFlagRule()
    # 5% of 90 items is 5 reviewed, all of them forced VALID items
    assert fit["in_sample"]["precision@5%"] == 0.0 and fit["cv"]["precision@5%"] == 0.0


def test_fit_without_room_for_a_nested_cv_says_why() -> None:
    _, fit = fit_risk_model(_dataset(6), tenant="t", source="human", name="x", n_folds=5, min_items=10, min_majors=2)
    assert fit["nested_cv"] is None and "inner CV needs 5" in fit["nested_cv_refused"]


def test_reports_the_stored_ranking_per_model_that_scored() -> None:
    """issue 34 item 3: each candidate-count band has its own model (risk.rule), and the report gives each its own
    figures, on its own items."""
    items = [labelled(lab, {"s": float(10 - i)}, passage=f"p{i}", n=i) for i, lab in enumerate(LABELS)]
    for i, it in enumerate(items):
        it.snapshot["risk"]["rule"] = "k1@1.0.0" if i % 2 else "k6@1.0.0"
    rep = calibration_report(items, tenant="t", source="human", n_labels=10, model=None)
    by = {e["name"]: e for e in rep["by_model"]}
    assert set(by) == {"stored_risk:k1@1.0.0", "stored_risk:k6@1.0.0"}
    # the odd items (1, 3, 5, 7, 9) are VALID, MINOR, VALID, VALID, VALID: no MAJOR, so no AUC there
    k1 = by["stored_risk:k1@1.0.0"]
    assert k1["n"] == 5 and k1["auc"]["major_vs_nonmajor"]["value"] is None
    # the even items: MAJOR (s=10), MAJOR (8), VALID (6), MINOR (4), VALID (2): both MAJORs first
    k6 = by["stored_risk:k6@1.0.0"]["auc"]["major_vs_nonmajor"]
    assert (k6["n_pos"], k6["n_neg"], k6["value"]) == (2, 3, 1.0)
