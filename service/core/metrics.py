"""Detection metrics for risk scores vs binary labels: AUC, recall/precision at budgets, Wilson, Spearman, kappa."""

from __future__ import annotations

import math
from collections.abc import Sequence

import msgspec
import numpy as np
from scipy import stats

__all__ = [
    "DEFAULT_BUDGETS",
    "BudgetStats",
    "auc",
    "budget_count",
    "budget_stats",
    "cohen_kappa",
    "precision_at_budget",
    "recall_at_budget",
    "spearman",
    "top_k_mask",
    "wilson_interval",
]

DEFAULT_BUDGETS: tuple[float, ...] = (0.01, 0.05, 0.10, 0.20)

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
    """ROC AUC as the Mann-Whitney U statistic over (n_pos * n_neg); tied scores count one half.

    NaN when one class is empty (the AUC is undefined, not 0.5).
    """
    s = _as_scores(scores)
    y = _as_labels(labels, s.shape[0])
    n_pos = int(y.sum())
    n_neg = int(y.shape[0] - n_pos)
    if n_pos == 0 or n_neg == 0:
        return math.nan
    # average ranks give every tied pair half a win, which is exactly the Mann-Whitney tie convention
    ranks = stats.rankdata(s, method="average")
    u = float(ranks[y].sum()) - n_pos * (n_pos + 1) / 2.0
    return u / (n_pos * n_neg)


def budget_count(n: int, budget: float) -> int:
    """Items reviewed at a budget: ceil(budget * n), at least 1 when n > 0 and budget > 0, at most n.

    The tiny epsilon keeps float products such as 0.2 * 7630 = 1526.0000000000002 from rounding up.
    """
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"budget {budget} is not a fraction in [0, 1]")
    if n <= 0 or budget == 0.0:
        return 0
    return min(n, max(1, math.ceil(budget * n - 1e-9)))


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
    """Wilson score interval for a binomial proportion (closed form); (nan, nan) when n == 0."""
    if n < 0 or successes < 0 or successes > n:
        raise ValueError(f"need 0 <= successes <= n, got {successes}/{n}")
    if n == 0:
        return (math.nan, math.nan)
    z = float(stats.norm.ppf(0.5 + confidence / 2.0))
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    # clamp float noise at the ends (p = 0 or 1 gives an exact bound of 0 or 1)
    return (max(0.0, centre - half), min(1.0, centre + half))


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


def spearman(x: ArrayLike, y: ArrayLike) -> float:
    """Spearman's rho: Pearson correlation of average ranks (ties share a rank); NaN if either side is constant."""
    a = _as_scores(x)
    b = _as_scores(y)
    if a.shape != b.shape:
        raise ValueError(f"{a.shape[0]} vs {b.shape[0]} values")
    if a.shape[0] < 2:
        return math.nan
    ra = stats.rankdata(a, method="average")
    rb = stats.rankdata(b, method="average")
    ra -= ra.mean()
    rb -= rb.mean()
    denom = math.sqrt(float((ra * ra).sum()) * float((rb * rb).sum()))
    if denom == 0.0:
        return math.nan
    return float((ra * rb).sum()) / denom


def cohen_kappa(a: Sequence[object], b: Sequence[object]) -> float:
    """Cohen's kappa of two raters over the same items: (p_o - p_e) / (1 - p_e).

    Categories are the union of both raters' labels. 1.0 when both raters use one and the same single category
    (perfect, if uninformative, agreement); NaN for no items.
    """
    if len(a) != len(b):
        raise ValueError(f"{len(a)} vs {len(b)} ratings")
    n = len(a)
    if n == 0:
        return math.nan
    cats = sorted({*a, *b}, key=repr)
    index = {c: i for i, c in enumerate(cats)}
    table = np.zeros((len(cats), len(cats)), dtype=np.float64)
    for x, y in zip(a, b, strict=True):
        table[index[x], index[y]] += 1
    p_o = float(np.trace(table)) / n
    p_e = float((table.sum(axis=1) * table.sum(axis=0)).sum()) / (n * n)
    if p_e >= 1.0:
        return 1.0
    return (p_o - p_e) / (1.0 - p_e)
