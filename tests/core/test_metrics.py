"""Detection and agreement metrics against hand-computed tables, and the row-wise helpers against SciPy/sklearn."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from service.core.metrics import (
    auc,
    auc_interval,
    budget_count,
    budget_stats,
    cohen_kappa,
    cohen_kappa_rows,
    pearson,
    pearson_rows,
    pooled_negatives_first,
    precision_at_budget,
    recall_at_budget,
    spearman,
    spearman_rows,
    top_k_mask,
    wilson_interval,
)

TOL = 1e-4


@pytest.mark.parametrize(
    ("scores", "labels", "expected"),
    [
        ([0.1, 0.4, 0.35, 0.8], [0, 0, 1, 1], 0.75),  # 3 of 4 positive-negative pairs ordered right
        ([3, 2, 1], [1, 0, 0], 1.0),
        ([1, 2, 3], [1, 0, 0], 0.0),
        ([1, 1, 2, 2], [0, 1, 0, 1], 0.5),  # two tied pairs count 1/2 each: (0.5 + 0 + 1 + 0.5) / 4
        ([5, 5, 5, 5], [1, 0, 1, 0], 0.5),  # all tied
        ([0.9, 0.8, 0.7, 0.6, 0.5], [1, 0, 1, 0, 0], 5 / 6),
        ([2, 1, 1, 0], [1, 1, 0, 0], 0.875),  # (1 + 1 + 0.5 + 1) / 4
    ],
)
def test_auc_table(scores: list[float], labels: list[int], expected: float) -> None:
    assert auc(scores, labels) == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize("labels", [[0, 0, 0], [1, 1, 1]])
def test_auc_undefined_with_one_class(labels: list[int]) -> None:
    assert math.isnan(auc([1, 2, 3], labels))


@pytest.mark.parametrize(
    ("n", "budget", "expected"),
    [
        (7630, 0.2, 1526),
        (100, 0.07, 7),  # 0.07 * 100 = 7.000000000000001 in floats
        (7630, 0.01, 77),
        (100, 0.01, 1),
        (50, 0.01, 1),
        (10, 0.15, 2),
        (0, 0.2, 0),
        (3, 1.0, 3),
        (10, 0.0, 0),
    ],
)
def test_budget_count(n: int, budget: float, expected: int) -> None:
    assert budget_count(n, budget) == expected


SCORES10 = [0.9, 0.8, 0.7, 0.6, 0.5, 0.4, 0.3, 0.2, 0.1, 0.0]
LABELS10 = [1, 0, 1, 0, 0, 0, 1, 0, 0, 0]


@pytest.mark.parametrize(
    ("budget", "recall", "precision"),
    [(0.01, 1 / 3, 1.0), (0.1, 1 / 3, 1.0), (0.2, 1 / 3, 0.5), (0.3, 2 / 3, 2 / 3), (0.7, 1.0, 3 / 7), (1.0, 1.0, 0.3)],
)
def test_recall_precision_at_budget(budget: float, recall: float, precision: float) -> None:
    assert recall_at_budget(SCORES10, LABELS10, budget) == pytest.approx(recall, abs=TOL)
    assert precision_at_budget(SCORES10, LABELS10, budget) == pytest.approx(precision, abs=TOL)


@pytest.mark.parametrize(
    ("scores", "labels", "budget", "mask", "recall"),
    [
        # ties at the cut are broken by input order: the earlier item is reviewed first
        ([1, 1, 1, 1], [0, 0, 0, 1], 0.25, [True, False, False, False], 0.0),
        ([1, 1, 1, 1], [1, 0, 0, 0], 0.25, [True, False, False, False], 1.0),
        ([0, 2, 2, 1], [0, 0, 1, 0], 0.25, [False, True, False, False], 0.0),
        ([0, 2, 2, 1], [0, 0, 1, 0], 0.5, [False, True, True, False], 1.0),
    ],
)
def test_ties_are_broken_by_input_order(
    scores: list[float], labels: list[int], budget: float, mask: list[bool], recall: float
) -> None:
    assert top_k_mask(scores, budget).tolist() == mask
    assert recall_at_budget(scores, labels, budget) == pytest.approx(recall, abs=TOL)


@pytest.mark.parametrize(
    ("k", "n", "lo", "hi"),
    [(0, 10, 0.0, 0.27754), (5, 10, 0.23659, 0.76341), (10, 10, 0.72246, 1.0), (1, 1, 0.20654, 1.0)],
)
def test_wilson_interval(k: int, n: int, lo: float, hi: float) -> None:
    got = wilson_interval(k, n)
    assert got[0] == pytest.approx(lo, abs=TOL)
    assert got[1] == pytest.approx(hi, abs=TOL)


@pytest.mark.parametrize(
    # closed form: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n), z the normal quantile
    ("k", "n", "confidence", "lo", "hi"),
    [(5, 10, 0.90, 0.269272, 0.730728), (3, 20, 0.99, 0.038787, 0.435587), (0, 5, 0.90, 0.0, 0.351117)],
)
def test_wilson_interval_other_confidences(k: int, n: int, confidence: float, lo: float, hi: float) -> None:
    got = wilson_interval(k, n, confidence)
    assert got[0] == pytest.approx(lo, abs=TOL)
    assert got[1] == pytest.approx(hi, abs=TOL)


def test_wilson_interval_empty() -> None:
    assert all(math.isnan(v) for v in wilson_interval(0, 0))


def test_budget_stats_counts_and_intervals() -> None:
    (st,) = budget_stats(SCORES10, LABELS10, (0.3,))
    assert (st.reviewed, st.hits, st.positives) == (3, 2, 3)
    assert st.recall == pytest.approx(2 / 3, abs=TOL)
    assert st.precision_ci == pytest.approx(wilson_interval(2, 3), abs=TOL)


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ([1, 2, 3], [10, 20, 30], 1.0),
        ([1, 2, 3], [30, 20, 10], -1.0),
        ([1, 2, 3, 4, 5], [5, 6, 7, 8, 7], 8 / math.sqrt(95)),  # y ranks 1, 2, 3.5, 5, 3.5
        ([1, 2, 3, 4], [1, 3, 2, 4], 0.8),  # 1 - 6 * 2 / (4 * 15)
    ],
)
def test_spearman_table(x: list[float], y: list[float], expected: float) -> None:
    assert spearman(x, y) == pytest.approx(expected, abs=TOL)


def test_spearman_constant_is_nan() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert math.isnan(spearman([1, 2, 3], [4, 4, 4]))
        assert math.isnan(spearman([1], [2]))


@pytest.mark.parametrize(
    ("x", "y", "expected"),
    [
        ([1, 2, 3], [2, 4, 7], 5 / math.sqrt(2 * 114 / 9)),  # centred: (-1, 0, 1) . (-7, -1, 8) / 3 = 5
        ([1, 2, 3, 4], [4, 3, 2, 1], -1.0),
        ([1, 2, 3, 4], [1, 3, 2, 4], 0.8),  # 4 / sqrt(5 * 5)
        ([1, 2, 3], [5, 5, 5], math.nan),  # a constant side: undefined
        ([0.1, 0.1, 0.1], [1, 2, 3], math.nan),  # constant up to float noise in the centring
    ],
)
def test_pearson_table(x: list[float], y: list[float], expected: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an undefined correlation is NaN, not a library warning in the logs
        got = pearson(x, y)
    assert math.isnan(got) if math.isnan(expected) else got == pytest.approx(expected, abs=TOL)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ([1, 1, 0, 0, 1, 0, 1, 1, 0, 1], [1, 0, 0, 0, 1, 1, 1, 1, 0, 1], (0.8 - 0.52) / 0.48),
        # the textbook 2x2 table [[20, 5], [10, 15]]: p_o = 0.7, p_e = 0.5
        (["y"] * 20 + ["y"] * 5 + ["n"] * 10 + ["n"] * 15, ["y"] * 20 + ["n"] * 5 + ["y"] * 10 + ["n"] * 15, 0.4),
        (["a", "b", "c"], ["a", "b", "c"], 1.0),
        (["a", "b"], ["b", "a"], -1.0),
        (["x", "x"], ["x", "x"], 1.0),  # one shared category: 1.0 by convention (the formula is 0/0)
        (["x", "x"], ["x", "y"], 0.0),  # p_o = 0.5 = p_e
        ([1, "a", 1], [1, "a", "a"], 0.4),  # mixed label types: p_o 2/3, p_e 4/9
    ],
)
def test_cohen_kappa_table(a: list[object], b: list[object], expected: float) -> None:
    assert cohen_kappa(a, b) == pytest.approx(expected, abs=TOL)


def test_kappa_is_nan_without_items() -> None:
    assert math.isnan(cohen_kappa([], []))


@pytest.mark.parametrize(
    ("pos", "neg", "budget", "recall", "area"),
    [
        ([1.0], [1.0, 0.0], 1 / 3, 0.0, 0.75),  # the tie at the cut counts against the score; AUC: half a win
        ([2.0], [1.0, 1.0], 1 / 3, 1.0, 1.0),
        ([0.0, 0.0], [0.0, 0.0, 0.0, 0.0], 0.5, 0.0, 0.5),  # a constant score finds nothing
    ],
)
def test_pooled_negatives_first(pos: list[float], neg: list[float], budget: float, recall: float, area: float) -> None:
    scores, labels = pooled_negatives_first(pos, neg)
    assert labels.tolist() == [False] * len(neg) + [True] * len(pos)
    assert recall_at_budget(scores, labels, budget) == pytest.approx(recall, abs=TOL)
    assert auc(scores, labels) == pytest.approx(area, abs=TOL)


@pytest.mark.parametrize("seed", range(5))
def test_row_helpers_match_scipy_and_sklearn(seed: int) -> None:
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 8, (6, 30)).astype(float)  # integer values: plenty of ties for the ranks
    y = x + rng.integers(-3, 4, (6, 30))
    assert pearson_rows(x, y) == pytest.approx(stats.pearsonr(x, y, axis=1).statistic, abs=1e-12)
    rho = [stats.spearmanr(a, b).statistic for a, b in zip(x, y, strict=True)]
    assert spearman_rows(x, y) == pytest.approx(rho, abs=1e-12)
    a = rng.integers(0, 3, (6, 30))
    b = np.where(rng.random((6, 30)) < 0.6, a, rng.integers(0, 3, (6, 30)))
    kappa = [cohen_kappa_score(r, t) for r, t in zip(a, b, strict=True)]
    assert cohen_kappa_rows(a, b, 3) == pytest.approx(kappa, abs=1e-12)


def _delong_by_hand(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    """DeLong's structural components written out pair by pair (O(m n)), a tie counting one half."""
    pos, neg = scores[labels], scores[~labels]
    psi = (pos[:, None] > neg[None, :]) + 0.5 * (pos[:, None] == neg[None, :])
    v10, v01 = psi.mean(axis=1), psi.mean(axis=0)
    se = math.sqrt(v10.var(ddof=1) / len(pos) + v01.var(ddof=1) / len(neg))
    z = stats.norm.ppf(0.975)
    return max(0.0, v10.mean() - z * se), min(1.0, v10.mean() + z * se)


def test_auc_interval_is_delongs() -> None:
    rng = np.random.default_rng(3)
    for n, shift in ((30, 0.5), (200, 1.0), (60, 0.0)):
        y = rng.random(n) < 0.3
        s = np.round(rng.normal(size=n) + shift * y, 1)  # rounded: ties across the classes
        lo, hi = auc_interval(s, y)
        want = _delong_by_hand(s, y)
        assert lo == pytest.approx(want[0], abs=1e-12) and hi == pytest.approx(want[1], abs=1e-12)
        assert lo <= auc(s, y) <= hi
    few = ([0.1, 0.9, 0.4, 0.6, 0.5, 0.7], [0, 1, 0, 1, 1, 0])
    wide = auc_interval(np.array(few[0]), np.array(few[1], dtype=bool))
    narrow = auc_interval(np.tile(few[0], 40), np.tile(few[1], 40).astype(bool))
    assert (wide[1] - wide[0]) > (narrow[1] - narrow[0])


def test_auc_interval_is_undefined_with_fewer_than_two_of_a_class_or_complete_separation() -> None:
    for scores, labels in (([0.1, 0.5, 0.9], [False, False, True]), ([0.1, 0.2, 0.8, 0.9], [False, False, True, True])):
        lo, hi = auc_interval(scores, labels)
        assert math.isnan(lo) and math.isnan(hi)
