"""Budget rank: where a candidate falls among the scores a risk model has produced, and its review tier.

The percentile (0-100) of a candidate is the share of a pool at or below it in the one ranking
(``service.core.ranking``). The pool is the model's reference distribution (its scores on the data it was fitted
on, stored as 1,001 quantiles) plus every unforced score the service has produced with that model version for the
tenant, pooled by count: the reference anchors the scale on day one, and the team's own traffic takes over as it
accumulates. The pool holds unforced scores only, so a forced candidate (a higher forcing level than anything in the
pool) sits at the 100th percentile, and its tier is ``top_1``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import msgspec
import numpy as np

from service.core.metrics import budget_count
from service.core.ranking import rank_order

__all__ = ["TIERS", "Budget", "SeenScores", "Tier", "budget_of", "reference_at_or_below", "tier_of", "tiers_within"]

Tier = Literal["top_1", "top_5", "top_10", "top_20", "rest"]
# (tier, lowest percentile in it): a candidate at the 95th percentile or above is in the top 5%
TIERS: tuple[tuple[Tier, float], ...] = (("top_1", 99.0), ("top_5", 95.0), ("top_10", 90.0), ("top_20", 80.0))


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
    for tier, lower in reversed(TIERS):
        for i in order[: budget_count(n, round(1.0 - lower / 100.0, 6))]:
            out[i] = tier
    return out
