"""Agreement metrics shared by Poller and MATA: Pearson, row-wise correlations, kappa, alpha, the bootstrap."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats
from sklearn.metrics import cohen_kappa_score

from service.core.metrics import (
    BootstrapOptions,
    bootstrap_interval,
    cohen_kappa,
    cohen_kappa_rows,
    krippendorff_alpha_nominal,
    krippendorff_alpha_nominal_rows,
    pearson,
    pearson_rows,
    spearman,
    spearman_rows,
)

# Krippendorff (2011), "Computing Krippendorff's Alpha-Reliability", the 4 observers x 12 units nominal example
KRIPPENDORFF_2011 = [
    [1, 2, 3, 3, 2, 1, 4, 1, 2, None, None, None],
    [1, 2, 3, 3, 2, 2, 4, 1, 2, 5, None, 3],
    [None, 3, 3, 3, 2, 3, 4, 2, 2, 5, 1, None],
    [1, 2, 3, 3, 2, 4, 4, 1, 2, 5, 1, None],
]


@pytest.mark.parametrize(
    ("units", "alpha"),
    [
        # published: 0.743
        (list(zip(*KRIPPENDORFF_2011, strict=True)), 0.743421),
        # by hand: o_CC = 4, o_II = 4, o_CI = o_IC = 2; n = 12; alpha = 1 - 11 * 4 / 72 = 7/18
        ([["C", "C", "C"], ["C", "C", "I"], ["I", "I", "I"], ["C", "I", "I"]], 7 / 18),
        # two raters in full agreement over two categories
        ([["a", "a"], ["b", "b"], ["a", "a"]], 1.0),
        # by hand: two raters, units (a,b), (b,a), (a,a): o_ab = o_ba = 2, o_aa = 2, n_a = 4, n_b = 2, n = 6:
        # 1 - 5 * 4 / (2 * 4 * 2) = -0.25
        ([["a", "b"], ["b", "a"], ["a", "a"]], -0.25),
        # one unit with a single value is not pairable: same as without it
        ([["a", "b"], ["b", "a"], ["a", "a"], ["b", None]], -0.25),
    ],
)
def test_krippendorff_alpha_nominal(units: list[list[object]], alpha: float) -> None:
    assert krippendorff_alpha_nominal(units) == pytest.approx(alpha, abs=1e-6)
    draws = np.arange(len(units))[None, :]
    assert krippendorff_alpha_nominal_rows(units, draws)[0] == pytest.approx(alpha, abs=1e-6)


def test_alpha_undefined_for_one_category_or_no_pairs() -> None:
    assert math.isnan(krippendorff_alpha_nominal([["a", "a"], ["a", "a"]]))
    assert math.isnan(krippendorff_alpha_nominal([["a", None], [None, "b"]]))


def test_alpha_rows_weights_units_by_how_often_a_draw_holds_them() -> None:
    units = [["a", "b"], ["b", "a"], ["a", "a"]]
    draws = np.array([[2, 2, 0], [0, 1, 2]])
    expected = [krippendorff_alpha_nominal([units[i] for i in row]) for row in draws]
    assert krippendorff_alpha_nominal_rows(units, draws) == pytest.approx(expected)


@pytest.mark.parametrize("seed", range(20))
def test_kappa_and_correlations_match_the_reference_libraries(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(5, 40))
    a = rng.choice(["correct", "incorrect", "partial"], n)
    b = rng.choice(["correct", "incorrect"], n)
    assert cohen_kappa(list(a), list(b)) == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)
    x = rng.integers(0, 6, n).astype(float)
    y = x + rng.integers(-2, 3, n)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0], abs=1e-12)
    assert spearman_rows(x[None], y[None])[0] == pytest.approx(spearman(x, y), abs=1e-12)
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0], abs=1e-12)


def test_row_correlations_respect_the_mask() -> None:
    x = np.array([[1.0, 2.0, 3.0, 100.0], [4.0, 1.0, 2.0, 3.0]])
    y = np.array([[2.0, 4.0, 7.0, -50.0], [1.0, 3.0, 2.0, 5.0]])
    mask = np.array([[True, True, True, False], [True, True, True, True]])
    got = pearson_rows(x, y, mask)
    assert got[0] == pytest.approx(stats.pearsonr([1, 2, 3], [2, 4, 7])[0])
    assert got[1] == pytest.approx(stats.pearsonr(x[1], y[1])[0])
    assert spearman_rows(x, y, mask)[0] == pytest.approx(1.0)


def test_constant_side_is_undefined_even_with_float_noise() -> None:
    # 0.1 * 3 / 3 != 0.1 in floating point: centred sums are not exactly zero, yet r is undefined
    assert math.isnan(pearson([0.1, 0.1, 0.1], [1.0, 2.0, 3.0]))
    assert math.isnan(pearson([1.0], [2.0]))


def test_kappa_rows_convention_for_one_shared_category() -> None:
    same = np.zeros((1, 4), dtype=int)
    assert cohen_kappa_rows(same, same, 3)[0] == 1.0
    assert cohen_kappa(["c"] * 4, ["c"] * 4) == 1.0


def test_bootstrap_is_seeded_paired_and_counts_undefined_resamples() -> None:
    x = np.array([1.0, 1.0, 1.0, 1.0, 2.0])
    y = np.array([1.0, 2.0, 3.0, 4.0, 5.0])

    def r(idx: np.ndarray) -> float:
        return pearson(x[idx], y[idx])

    options = BootstrapOptions(resamples=500, confidence=0.9, seed=7)
    first = bootstrap_interval(5, r, options)
    again = bootstrap_interval(5, r, options)
    other = bootstrap_interval(5, r, BootstrapOptions(resamples=500, confidence=0.9, seed=8))
    assert first is not None and first == again and first != other
    # resamples without the single 2.0 leave x constant: about (4/5)^5 = 33% of them
    assert 0.25 < first.undefined / 500 < 0.42
    assert first.low <= first.high and first.confidence == 0.9


def test_bootstrap_vectorized_equals_the_loop() -> None:
    values = np.array([3.0, 9.0, 4.0, 1.0, 7.0, 5.0])
    options = BootstrapOptions(resamples=300, seed=3)
    loop = bootstrap_interval(6, lambda idx: float(values[idx].mean()), options)
    vectorized = bootstrap_interval(6, lambda draws: values[draws].mean(axis=1), options, vectorized=True)
    assert loop == vectorized
    assert bootstrap_interval(1, lambda idx: 0.0, options) is None
