"""Detection and agreement metrics: AUC, budgets, Wilson, Spearman, Pearson, kappa, alpha, bootstrap.

AUC, Wilson intervals, Spearman, Pearson and Cohen's kappa are scikit-learn's and SciPy's, with this module's
conventions for the undefined cases spelled out (NaN, never a made-up 0.5). The budget logic is ours: how many
items a reviewer sees is ``service.core.budget``'s, ties at the cut are broken here. The row-wise helpers
(``*_rows``) compute many bootstrap resamples at once, with a mask of missing pairs, which the libraries do not; the
tests check them against the libraries.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Annotated

import msgspec
import numpy as np

from service.core.budget import REVIEW_BUDGETS, budget_count

__all__ = [
    "DEFAULT_BUDGETS",
    "BootstrapOptions",
    "BudgetStats",
    "Interval",
    "auc",
    "auc_interval",
    "bootstrap_interval",
    "budget_count",
    "budget_stats",
    "cohen_kappa",
    "cohen_kappa_rows",
    "krippendorff_alpha_nominal",
    "krippendorff_alpha_nominal_rows",
    "pearson",
    "pearson_rows",
    "pooled_negatives_first",
    "precision_at_budget",
    "recall_at_budget",
    "spearman",
    "spearman_rows",
    "top_k_mask",
    "wilson_interval",
]


def _stats() -> ModuleType:
    """scipy.stats, imported on first use: with scikit-learn's metrics it is about 1 s of CPU, paid by every API,
    worker and CLI process that imports this module (through the app) and never computes a statistic."""
    from scipy import stats

    return stats


# the review budgets are the budget module's (with the rule of how many items one covers)
DEFAULT_BUDGETS = REVIEW_BUDGETS

ArrayLike = Sequence[float] | Sequence[int] | Sequence[bool] | np.ndarray


def _as_scores(scores: ArrayLike) -> np.ndarray:
    arr = np.asarray(scores, dtype=np.float64).ravel()
    if np.isnan(arr).any():
        raise ValueError("scores contain NaN; rank only computed values")
    return arr


def _as_labels(labels: ArrayLike, n: int) -> np.ndarray:
    arr = np.asarray(labels).ravel().astype(bool)
    if arr.shape[0] != n:
        raise ValueError(f"{n} scores but {arr.shape[0]} labels")
    return arr


def auc(scores: ArrayLike, labels: ArrayLike) -> float:
    """ROC AUC (``sklearn.metrics.roc_auc_score``): the share of positive-negative pairs ordered right, a tied
    pair counting one half. NaN when one class is empty (the AUC is undefined, not 0.5)."""
    s = _as_scores(scores)
    y = _as_labels(labels, s.shape[0])
    n_pos = int(y.sum())
    if n_pos == 0 or n_pos == y.shape[0]:
        return math.nan
    from sklearn.metrics import roc_auc_score  # imported on first use, as _stats says

    return float(roc_auc_score(y, s))


def auc_interval(scores: ArrayLike, labels: ArrayLike, confidence: float = 0.95) -> tuple[float, float]:
    """DeLong's interval for the AUC (DeLong, DeLong & Clarke-Pearson 1988): the variance of the Mann-Whitney
    statistic from its structural components (midranks: a tie counts one half, as in ``auc``), a normal interval
    clipped to [0, 1]. (nan, nan) when a class has fewer than two items (the variance is undefined) and at complete
    separation (AUC 0 or 1), where the variance is zero and a zero-width interval would claim a certainty that a
    few items do not give."""
    s = _as_scores(scores)
    y = _as_labels(labels, s.shape[0])
    pos, neg = s[y], s[~y]
    m, n = pos.shape[0], neg.shape[0]
    if m < 2 or n < 2:
        return (math.nan, math.nan)
    ranks = _stats().rankdata(np.concatenate([pos, neg]))
    # V10: share of negatives below each positive; V01: share of positives above each negative (ties one half)
    v10 = (ranks[:m] - _stats().rankdata(pos)) / n
    v01 = 1.0 - (ranks[m:] - _stats().rankdata(neg)) / m
    value = float(v10.mean())
    if value <= 0.0 or value >= 1.0:
        return (math.nan, math.nan)
    se = math.sqrt(float(np.var(v10, ddof=1)) / m + float(np.var(v01, ddof=1)) / n)
    z = float(_stats().norm.ppf(0.5 + confidence / 2.0))
    return (max(0.0, value - z * se), min(1.0, value + z * se))


def top_k_mask(scores: ArrayLike, budget: float) -> np.ndarray:
    """Boolean mask of the items a reviewer sees at ``budget``: the k highest scores.

    Ties are broken deterministically by input order (the earlier item is reviewed first), via a stable sort, so the
    same scores always select the same items; callers wanting another tie order should pass scores in that order.
    """
    s = _as_scores(scores)
    k = budget_count(s.shape[0], budget)
    order = np.argsort(-s, kind="stable")
    mask = np.zeros(s.shape[0], dtype=bool)
    mask[order[:k]] = True
    return mask


def pooled_negatives_first(positives: ArrayLike, negatives: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
    """(scores, labels) of positives and negatives in one pool, negatives first: with the input-order tie rule of
    ``top_k_mask`` a positive tied with a negative at the budget cut is not counted as found (ties count against the
    score, never for it)."""
    neg = _as_scores(negatives)
    pos = _as_scores(positives)
    labels = np.concatenate([np.zeros(neg.shape[0], dtype=bool), np.ones(pos.shape[0], dtype=bool)])
    return np.concatenate([neg, pos]), labels


def recall_at_budget(scores: ArrayLike, labels: ArrayLike, budget: float) -> float:
    """Share of positives inside the top ``budget`` (NaN without positives)."""
    s = _as_scores(scores)
    y = _as_labels(labels, s.shape[0])
    n_pos = int(y.sum())
    if n_pos == 0:
        return math.nan
    return float((top_k_mask(s, budget) & y).sum()) / n_pos


def precision_at_budget(scores: ArrayLike, labels: ArrayLike, budget: float) -> float:
    """Share of the top ``budget`` that is positive (NaN when the budget selects nothing)."""
    s = _as_scores(scores)
    y = _as_labels(labels, s.shape[0])
    mask = top_k_mask(s, budget)
    k = int(mask.sum())
    if k == 0:
        return math.nan
    return float((mask & y).sum()) / k


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (``scipy.stats.binomtest(...).proportion_ci``, no continuity
    correction); (nan, nan) when n == 0."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (math.nan, math.nan)
    ci = _stats().binomtest(successes, n).proportion_ci(confidence_level=confidence, method="wilson")
    return (float(ci.low), float(ci.high))


class BudgetStats(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """What a reviewer gets at one budget, with 95% Wilson intervals on recall and precision."""

    budget: float
    reviewed: int
    hits: int
    positives: int
    recall: float
    recall_ci: tuple[float, float]
    precision: float
    precision_ci: tuple[float, float]


def budget_stats(
    scores: ArrayLike, labels: ArrayLike, budgets: Sequence[float] = DEFAULT_BUDGETS, confidence: float = 0.95
) -> list[BudgetStats]:
    """Recall and precision (with Wilson intervals) at each budget, top-k by score with stable tie order."""
    s = _as_scores(scores)
    y = _as_labels(labels, s.shape[0])
    positives = int(y.sum())
    out: list[BudgetStats] = []
    for b in budgets:
        mask = top_k_mask(s, b)
        k = int(mask.sum())
        hits = int((mask & y).sum())
        out.append(
            BudgetStats(
                budget=float(b),
                reviewed=k,
                hits=hits,
                positives=positives,
                recall=hits / positives if positives else math.nan,
                recall_ci=wilson_interval(hits, positives, confidence),
                precision=hits / k if k else math.nan,
                precision_ci=wilson_interval(hits, k, confidence),
            )
        )
    return out


def _pair(x: ArrayLike, y: ArrayLike) -> tuple[np.ndarray, np.ndarray] | None:
    """Both sides as float arrays, or None when a correlation is undefined (fewer than two pairs, or a side
    constant: tested exactly, as max == min, since float noise can hide a constant side from the libraries)."""
    a = _as_scores(x)
    b = _as_scores(y)
    if a.shape != b.shape:
        raise ValueError(f"{a.shape[0]} vs {b.shape[0]} values")
    if a.shape[0] < 2 or a.max() == a.min() or b.max() == b.min():
        return None
    return a, b


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho (``scipy.stats.spearmanr``, ties share their average rank); NaN if either side is constant
    or there are fewer than two pairs."""
    pair = _pair(x, y)
    return math.nan if pair is None else float(_stats().spearmanr(*pair).statistic)


def cohen_kappa(a: Sequence[object], b: Sequence[object]) -> float:
    """Cohen's kappa of two raters over the same items (``sklearn.metrics.cohen_kappa_score``).

    Categories are the union of both raters' labels (any hashable values: they are coded first, so mixed types
    need no common order). 1.0 when both raters use one and the same single category (perfect, if uninformative,
    agreement, where the formula is 0/0); NaN for no items.
    """
    if len(a) != len(b):
        raise ValueError(f"{len(a)} vs {len(b)} ratings")
    if len(a) == 0:
        return math.nan
    cats = sorted({*a, *b}, key=repr)
    if len(cats) == 1:
        return 1.0
    index = {c: i for i, c in enumerate(cats)}
    codes_a = np.array([index[x] for x in a], dtype=np.int64)
    codes_b = np.array([index[y] for y in b], dtype=np.int64)
    from sklearn.metrics import cohen_kappa_score  # imported on first use, as _stats says

    return float(cohen_kappa_score(codes_a, codes_b))


def cohen_kappa_rows(a: np.ndarray, b: np.ndarray, n_categories: int) -> np.ndarray:
    """``cohen_kappa`` of each row pair of two (rows x n) arrays of category codes ``0..n_categories-1``."""
    a = np.asarray(a)
    b = np.asarray(b)
    p_o = (a == b).mean(axis=1)
    p_e = np.zeros(a.shape[0])
    for c in range(n_categories):
        p_e += (a == c).mean(axis=1) * (b == c).mean(axis=1)
    with np.errstate(invalid="ignore", divide="ignore"):
        kappa = (p_o - p_e) / (1.0 - p_e)
    return np.where(p_e >= 1.0, 1.0, kappa)


def pearson(x: ArrayLike, y: ArrayLike) -> float:
    """Pearson's r (``scipy.stats.pearsonr``); NaN if either side is constant or there are fewer than two pairs."""
    pair = _pair(x, y)
    return math.nan if pair is None else float(_stats().pearsonr(*pair).statistic)


def pearson_rows(x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Pearson's r of each row pair of two (rows x m) arrays over the ``mask``ed entries (None = all).

    NaN for a row with fewer than two pairs or a constant side (tested exactly, as max == min, because the
    centred sums of a constant row need not be exactly zero in floating point).
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = np.ones(x.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    m = m & np.isfinite(x) & np.isfinite(y)
    w = m.astype(np.float64)
    x0 = np.where(m, x, 0.0)
    y0 = np.where(m, y, 0.0)
    count = w.sum(axis=1)
    safe = np.maximum(count, 1.0)
    dx = (x0 - (x0.sum(axis=1) / safe)[:, None]) * w
    dy = (y0 - (y0.sum(axis=1) / safe)[:, None]) * w
    constant = np.zeros(count.shape, dtype=bool)
    for v in (x, y):
        top = np.where(m, v, -np.inf).max(axis=1)
        bottom = np.where(m, v, np.inf).min(axis=1)
        constant |= top == bottom
    denom = np.sqrt((dx * dx).sum(axis=1) * (dy * dy).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (dx * dy).sum(axis=1) / denom
    return np.where((count >= 2) & ~constant & (denom > 0), np.clip(r, -1.0, 1.0), np.nan)


def spearman_rows(x: np.ndarray, y: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Spearman's rho of each row pair: ``pearson_rows`` of average ranks among the pairs present in the row."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    m = np.ones(x.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool)
    m = m & np.isfinite(x) & np.isfinite(y)
    rx = _stats().rankdata(np.where(m, x, np.nan), method="average", axis=1, nan_policy="omit")
    ry = _stats().rankdata(np.where(m, y, np.nan), method="average", axis=1, nan_policy="omit")
    return pearson_rows(rx, ry, m)


def _unit_coincidences(units: Sequence[Sequence[object | None]]) -> np.ndarray:
    """Per unit, its (K x K) coincidences: each ordered pair of values adds 1/(m-1); unpairable units add 0."""
    values = sorted({v for unit in units for v in unit if v is not None}, key=repr)
    index = {v: i for i, v in enumerate(values)}
    out = np.zeros((len(units), len(values), len(values)), dtype=np.float64)
    for u, unit in enumerate(units):
        present = [index[v] for v in unit if v is not None]
        m = len(present)
        if m < 2:
            continue
        counts = np.bincount(present, minlength=len(values)).astype(np.float64)
        # ordered pairs of distinct positions: n_c * n_k for c != k, n_c * (n_c - 1) on the diagonal
        out[u] = (np.outer(counts, counts) - np.diag(counts)) / (m - 1)
    return out


def _alpha(o: np.ndarray) -> np.ndarray:
    """Nominal alpha from (..., K, K) coincidence matrices."""
    n_c = o.sum(axis=-1)
    n = n_c.sum(axis=-1)
    expected = n * n - (n_c * n_c).sum(axis=-1)  # sum over c != k of n_c * n_k
    observed = o.sum(axis=(-2, -1)) - np.trace(o, axis1=-2, axis2=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        alpha = 1.0 - (n - 1.0) * observed / expected
    return np.where((n >= 2) & (expected > 0), alpha, np.nan)


def krippendorff_alpha_nominal(units: Sequence[Sequence[object | None]]) -> float:
    """Krippendorff's alpha for nominal data: ``units[u][r]`` is rater r's value for unit u, None = missing.

    Coincidences: every ordered pair of values within a unit of m >= 2 values adds 1/(m-1); units with fewer
    values are not pairable. alpha = 1 - (n-1) * sum_{c!=k} o_ck / sum_{c!=k} n_c * n_k. NaN when fewer than
    two pairable values or a single category is used (no expected disagreement: alpha is undefined).
    """
    per_unit = _unit_coincidences(units)
    if per_unit.shape[1] == 0:
        return math.nan
    return float(_alpha(per_unit.sum(axis=0)))


def krippendorff_alpha_nominal_rows(units: Sequence[Sequence[object | None]], draws: np.ndarray) -> np.ndarray:
    """``krippendorff_alpha_nominal`` of each row of unit indices (a bootstrap draw of units per row)."""
    per_unit = _unit_coincidences(units)
    if per_unit.shape[1] == 0:
        return np.full(draws.shape[0], np.nan)
    weights = np.stack([np.bincount(row, minlength=len(units)) for row in draws]).astype(np.float64)
    return _alpha(np.tensordot(weights, per_unit, axes=1))


class BootstrapOptions(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Percentile bootstrap over items (resampled with replacement); the seed makes intervals reproducible."""

    resamples: Annotated[int, msgspec.Meta(ge=100, le=20_000)] = 2000
    confidence: Annotated[float, msgspec.Meta(gt=0.0, lt=1.0)] = 0.95
    seed: int = 0


class Interval(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """A percentile bootstrap interval; ``undefined`` counts resamples where the statistic was NaN (left out)."""

    low: float
    high: float
    confidence: float
    resamples: int
    undefined: int


def bootstrap_interval(
    n: int,
    statistic: Callable[[np.ndarray], float] | Callable[[np.ndarray], np.ndarray],
    options: BootstrapOptions,
    *,
    vectorized: bool = False,
) -> Interval | None:
    """Resample item indices ``0..n-1`` (paired: every statistic of one call sees the same draws for a seed).

    ``statistic`` gets one index array per resample, or (``vectorized``) the whole (resamples x n) matrix and
    returns one value per row. None when n < 2 or no resample has a defined value.
    scipy.stats.bootstrap is not used: one degenerate resample (e.g. a constant side for a correlation) turns its
    whole interval into NaN, where this counts the undefined resamples and reports the interval of the rest.
    """
    if n < 2:
        return None
    rng = np.random.default_rng(options.seed)
    draws = rng.integers(0, n, size=(options.resamples, n))
    if vectorized:
        values = np.asarray(statistic(draws), dtype=np.float64).reshape(options.resamples)
    else:
        values = np.fromiter((float(statistic(row)) for row in draws), dtype=np.float64, count=options.resamples)
    defined = values[np.isfinite(values)]
    if defined.size == 0:
        return None
    tail = (1.0 - options.confidence) / 2.0
    low, high = np.quantile(defined, [tail, 1.0 - tail])
    return Interval(
        low=float(low),
        high=float(high),
        confidence=options.confidence,
        resamples=options.resamples,
        undefined=int(values.size - defined.size),
    )
