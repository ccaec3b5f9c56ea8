"""Report figures against a hand-computed table, refusals, judge agreement, grouped folds and fit selection."""

from __future__ import annotations

import random

import numpy as np
import pytest

from service.core.calibration import calibration_report, fit_risk_model, grouped_folds
from service.core.errors import InputError
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


def _dataset(n_passages: int, seed: int = 1) -> list:
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
    assert fit["cv"]["recall@20%"] is not None and fit["cv"]["auc_major_vs_nonmajor"] > 0.7
    assert model.reference is not None and len(model.reference.quantiles) == 1001
    assert np.isfinite([s.sd for s in model.signals]).all()


def test_fit_refuses_too_few_labels() -> None:
    with pytest.raises(InputError) as exc:
        fit_risk_model(_dataset(3), tenant="t", source="human", name="x", min_items=40)
    assert "need 40" in exc.value.detail and exc.value.extra["have"]["items"] == 9
