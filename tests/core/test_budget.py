"""Budget rank: the percentile among reference plus seen scores (at-or-below counts), and the tiers."""

from __future__ import annotations

import pytest

from service.core import metrics
from service.core.budget import (
    DEFAULT_BUDGET,
    REVIEW_BUDGETS,
    STUDY_BUDGETS,
    TIERS,
    budget_count,
    budget_of,
    reference_at_or_below,
    tier_of,
    tiers_within,
)
from service.core.ranking import rank_key
from service.platform.settings import Settings

# 1,001 equally spaced reference quantiles of scores 0.000 ... 1.000 standing for n = 1,000 scores
UNIFORM = [k / 1000 for k in range(1001)]


@pytest.mark.parametrize(
    ("percentile", "tier"),
    [
        (100.0, "top_1"),
        (99.0, "top_1"),
        (98.999, "top_5"),
        (95.0, "top_5"),
        (94.999, "top_10"),
        (90.0, "top_10"),
        (89.999, "top_20"),
        (80.0, "top_20"),
        (79.999, "rest"),
        (0.0, "rest"),
    ],
)
def test_tier_boundaries(percentile: float, tier: str) -> None:
    assert tier_of(percentile) == tier


@pytest.mark.parametrize(
    ("score", "below"),
    [
        (-1.0, 0.0),
        (0.0, 1 / 1001 * 1000),  # equal to the lowest quantile: it counts (at or below)
        (0.5, 501 / 1001 * 1000),
        (0.5005, 501 / 1001 * 1000),
        (1.0, 1000.0),
        (7.0, 1000.0),
    ],
)
def test_reference_counts_at_or_below(score: float, below: float) -> None:
    assert reference_at_or_below(UNIFORM, 1000, score) == pytest.approx(below, abs=1e-9)


def test_reference_ties_count_fully() -> None:
    # five equal quantiles: a score equal to them is above all five (side="right"), a hair below is above none
    assert reference_at_or_below([1.0] * 5, 10, 1.0) == pytest.approx(10.0)
    assert reference_at_or_below([1.0] * 5, 10, 0.999) == 0.0


@pytest.mark.parametrize(
    ("score", "seen_total", "seen_below", "percentile", "tier"),
    [
        (0.5, 0, 0, 50.05, "rest"),  # reference alone: 501/1001 of 1,000
        (0.5, 1000, 0, 25.025, "rest"),  # the same score below every seen score halves its rank
        (0.5, 1000, 1000, 75.025, "rest"),  # ... above every seen score raises it
        (0.995, 0, 0, 99.5, "top_1"),
        (0.995, 9000, 8000, 89.95, "top_20"),  # traffic riskier than the reference pushes it down a tier
    ],
)
def test_budget_pools_reference_and_seen(
    score: float, seen_total: int, seen_below: int, percentile: float, tier: str
) -> None:
    b = budget_of(UNIFORM, 1000, score, False, seen_total, seen_below)
    assert b.percentile == pytest.approx(percentile, abs=1e-3)
    assert (b.tier, b.reference_n, b.seen_n, b.forced) == (tier, 1000, seen_total, False)


def test_forced_candidate_ranks_above_the_whole_pool() -> None:
    b = budget_of(UNIFORM, 1000, -50.0, True, 500, 0)
    assert (b.percentile, b.tier, b.forced) == (100.0, "top_1", True)


def test_no_pool_at_all() -> None:
    assert budget_of([], 0, 1.0, False, 0, 0).percentile == 50.0
    assert budget_of([], 0, 1.0, False, 4, 3).percentile == 75.0


def test_tiers_within_follow_the_one_ranking() -> None:
    keys = [rank_key(float(s), None) for s in range(100)][::-1]
    keys[99] = rank_key(-5.0, "critical")  # lowest score but forced: the top 1%
    tiers = tiers_within(keys)
    assert tiers[99] == "top_1"
    assert tiers[0:4] == ["top_5"] * 4
    assert tiers[4:9] == ["top_10"] * 5
    assert tiers[9:19] == ["top_20"] * 10
    assert set(tiers[19:99]) == {"rest"}


@pytest.mark.parametrize(
    ("n", "fraction", "expected"),
    # at least one of a non-empty set; 0.07 * 100 is 7.000000000000001 in floats, and 7 candidates are covered
    [(1, 1e-12, 1), (3, 0.1, 1), (100, 0.07, 7), (10, 0.25, 3), (10, 0.0, 0), (4, 1.0, 4)],
)
def test_the_cascade_checks_as_many_candidates_as_a_budget_covers(n: int, fraction: float, expected: int) -> None:
    """One count rule: the LLM cascade's eligible tail is the metrics' ``budget_count`` (at least one, ceil with
    the float guard), so a review budget means the same candidates in a report and in the cascade."""
    from service.core.judges.llm import CascadeItem, Judge, Panel, plan_cascade

    panel = Panel(name="p", version="1", judges=[Judge(id="j", model="m", family="openai")])
    items = [CascadeItem(str(i), "s", "c", routing_score=float(i)) for i in range(n)]
    plan = plan_cascade(items, panel, budget_fraction=fraction, max_calls=10**6)
    assert plan.budget_candidates == budget_count(n, fraction) == expected
    assert sum(1 for c in plan.candidates if c.runs("gemba")) == expected


def test_the_tiers_are_cut_at_the_review_budgets() -> None:
    assert REVIEW_BUDGETS == metrics.DEFAULT_BUDGETS == (0.01, 0.05, 0.10, 0.20)
    assert STUDY_BUDGETS == (0.05, 0.10, 0.20) and DEFAULT_BUDGET == 0.20
    # the LLM cascade's default share is this cut, written out in the settings (which import nothing of the core)
    assert Settings.from_env({}).llm.review_budget == DEFAULT_BUDGET
    assert TIERS == (("top_1", 99.0), ("top_5", 95.0), ("top_10", 90.0), ("top_20", 80.0))
    # 200 candidates ranked among themselves: 2, 10, 20 and 40 of them in the top 1, 5, 10 and 20%
    tiers = tiers_within([(0, float(i)) for i in range(200)])
    assert [tiers.count(t) for t in ("top_1", "top_5", "top_10", "top_20", "rest")] == [2, 8, 10, 20, 160]
