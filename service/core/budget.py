"""Budget rank: where a candidate falls among the scores a risk model has produced, and its review tier.

The percentile (0-100) of a candidate is the share of a pool at or below it in the one ranking
(``service.core.ranking``). The pool is the model's reference distribution (its scores on the data it was fitted
on, stored as 1,001 quantiles) plus every unforced score the service has produced with that model version for the
tenant, pooled by count: the reference anchors the scale on day one, and the team's own traffic takes over as it
accumulates. The pool holds unforced scores only, so a forced candidate (a higher forcing level than anything in the
pool) sits at the 100th percentile, and its tier is ``top_1``.

The review budgets (the shares of candidates a reviewer reads, riskiest first: 1, 5, 10 and 20%), the tiers cut at
them and how many candidates a budget covers (``budget_count``) are decided here, for the metrics, the calibration
reports, the LLM cascade and the benches alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

import msgspec
import numpy as np

from service.core.ranking import rank_order

__all__ = [
    "DEFAULT_BUDGET",
    "REVIEW_BUDGETS",
    "STUDY_BUDGETS",
    "TIERS",
    "Budget",
    "SeenScores",
    "Tier",
    "budget_count",
    "budget_of",
    "reference_at_or_below",
    "tier_of",
    "tiers_within",
]

Tier = Literal["top_1", "top_5", "top_10", "top_20", "rest"]
# the shares of candidates a reviewer reads, riskiest first; one tier per budget
REVIEW_BUDGETS: tuple[float, ...] = (0.01, 0.05, 0.10, 0.20)
_TIER_NAMES: tuple[Tier, ...] = ("top_1", "top_5", "top_10", "top_20")
# the budgets the study reports (recall at 5, 10 and 20%), and the one a single figure is given at
STUDY_BUDGETS: tuple[float, ...] = REVIEW_BUDGETS[1:]
DEFAULT_BUDGET: float = REVIEW_BUDGETS[-1]
# (tier, lowest percentile in it): a candidate at the 95th percentile or above is in the top 5%
TIERS: tuple[tuple[Tier, float], ...] = tuple(
    (tier, round(100.0 * (1.0 - budget), 6)) for tier, budget in zip(_TIER_NAMES, REVIEW_BUDGETS, strict=True)
)


def budget_count(n: int, budget: float) -> int:
    """Items reviewed at a budget: ceil(budget * n), at least 1 when n > 0 and budget > 0, at most n.

    The tiny epsilon keeps float products such as 0.07 * 100 = 7.000000000000001 from rounding up.
    """
    if not 0.0 <= budget <= 1.0:
        raise ValueError(f"budget {budget} is not a fraction in [0, 1]")
    if n <= 0 or budget == 0.0:
        return 0
    return min(n, max(1, math.ceil(budget * n - 1e-9)))


class Budget(msgspec.Struct, frozen=True):
    """A candidate's budget rank: percentile (0-100, higher = riskier), tier, and the pool it was ranked in."""

    percentile: float
    tier: Tier
    reference_n: int  # scores in the model's reference distribution
    seen_n: int  # unforced scores this tenant's traffic has added to the pool
    forced: bool  # a forcing flag put it above the whole pool


class SeenScores(msgspec.Struct, frozen=True):
    """How many scores of one model version the tenant's traffic has produced, and how many lie at or below each
    score asked about (aligned with the scores of the request)."""

    total: int
    at_or_below: list[int]


def tier_of(percentile: float) -> Tier:
    """The review tier of a percentile on the 0-100 scale (``TIERS``)."""
    for tier, lower in TIERS:
        if percentile >= lower:
            return tier
    return "rest"


def reference_at_or_below(quantiles: Sequence[float], n: int, score: float) -> float:
    """How many of the ``n`` reference scores (summarised by equally spaced ``quantiles``) lie at or below
    ``score``: a score equal to a quantile counts that quantile (``side="right"``)."""
    if not quantiles or n <= 0:
        return 0.0
    q = np.asarray(quantiles, dtype=np.float64)
    return float(np.searchsorted(q, score, side="right")) / q.shape[0] * n


def budget_of(
    quantiles: Sequence[float], reference_n: int, score: float, forced: bool, seen_total: int, seen_at_or_below: int
) -> Budget:
    """The budget rank of one candidate against the pool (see the module docstring)."""
    ref_n = reference_n if quantiles else 0
    total = ref_n + seen_total
    # everything in the pool is unforced, so a forced candidate ranks above all of it
    below = float(total) if forced else reference_at_or_below(quantiles, ref_n, score) + seen_at_or_below
    pct = 100.0 * below / total if total else (100.0 if forced else 50.0)
    pct = round(min(max(pct, 0.0), 100.0), 3)
    return Budget(percentile=pct, tier=tier_of(pct), reference_n=ref_n, seen_n=seen_total, forced=forced)


def tiers_within(keys: Sequence[tuple[int, float]]) -> list[Tier]:
    """Tiers relative to a set of candidates itself (its top 1%, 5%, 10%, 20% in the one ranking; ceil counts), for
    candidates ranked only against each other."""
    n = len(keys)
    order = rank_order(keys)
    out: list[Tier] = ["rest"] * n
    for tier, budget in reversed(list(zip(_TIER_NAMES, REVIEW_BUDGETS, strict=True))):
        for i in order[: budget_count(n, budget)]:
            out[i] = tier
    return out
