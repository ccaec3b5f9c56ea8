"""Poller agreement: the research's published table reproduced, and hand-computed figures on a small table."""

from __future__ import annotations

import math

import pytest

from service.companions.poller import (
    DEFAULT_DIMENSIONS,
    Comparison,
    ItemScores,
    PollerAgreementRequest,
    ScoreSet,
    poller_agreement,
)
from service.core.metrics import BootstrapOptions
from service.platform.errors import InputError

# the research's per-dimension means (GPT-4-Turbo), in the order of DEFAULT_DIMENSIONS
HUMAN = [80.33, 79.05, 81.18, 77.83, 76.15, 79.40, 78.80, 79.88]
GPT4_P0 = [95.25, 92.25, 97.00, 93.13, 88.75, 90.38, 96.50, 94.38]
GPT4_P3 = [90.00, 85.00, 89.00, 80.13, 79.38, 78.25, 87.13, 90.50]


def _one_item(values: list[float]) -> list[ItemScores]:
    return [ItemScores("means", dict(zip(DEFAULT_DIMENSIONS, values, strict=True)))]


def test_published_means_give_the_published_errors_and_reduction() -> None:
    result = poller_agreement(
        PollerAgreementRequest(
            human=_one_item(HUMAN), systems=[ScoreSet("P0", _one_item(GPT4_P0)), ScoreSet("P3", _one_item(GPT4_P3))]
        )
    )
    p0, p3 = result.systems
    assert round(p0.average.abs_mean_error, 2) == 14.38  # type: ignore[arg-type]
    assert round(p3.average.abs_mean_error, 2) == 6.13  # type: ignore[arg-type]
    assert p0.average.abs_mean_error == pytest.approx(14.3775)
    assert p3.average.abs_mean_error == pytest.approx(6.13375)
    # the mean of per-dimension absolute errors, not the error of the mean score (which would be 5.846)
    assert abs(p3.average.judge_mean - p3.average.human_mean) == pytest.approx(5.84625)  # type: ignore[operator]
    defamiliarization = p3.dimensions[DEFAULT_DIMENSIONS.index("defamiliarization")]
    assert defamiliarization.bias == pytest.approx(-1.15) and defamiliarization.abs_mean_error == pytest.approx(1.15)
    (reduction,) = result.reductions
    assert (reduction.baseline, reduction.system) == ("P0", "P3")
    assert round(reduction.average.reduction_percent, 2) == 57.34  # type: ignore[arg-type]
    assert round((14.38 - 6.13) / 14.38 * 100, 2) == 57.37  # the research divided the rounded errors
    rows = {row.label: row.values for row in result.table.rows}
    assert result.table.columns == [*DEFAULT_DIMENSIONS, "average"]
    assert rows["human"][:8] == pytest.approx(HUMAN) and rows["P3"][:8] == pytest.approx(GPT4_P3)
    assert rows["P0 |error|"][-1] == pytest.approx(14.3775)
    assert rows["reduction % P3 vs P0"][-1] == pytest.approx(57.3379, abs=1e-4)
    # one item: no correlation, no interval
    assert p3.dimensions[0].spearman is None and p3.dimensions[0].bias_ci is None


HUMAN_SMALL = [
    ItemScores("i1", {"content": 80, "rhythm": 50}),
    ItemScores("i2", {"content": 70, "rhythm": 60}),
    ItemScores("i3", {"content": 90, "rhythm": 70}),
    ItemScores("i4", {"content": 60, "rhythm": 80}),
]
JUDGE_A = [
    ItemScores("i1", {"content": 85, "rhythm": 70}),
    ItemScores("i2", {"content": 80, "rhythm": 60}),
    ItemScores("i3", {"content": 88, "rhythm": 65}),
    ItemScores("i4", {"content": 75}),  # rhythm not scored (a parse failure): 3 pairs
]
JUDGE_B = [
    ItemScores("i1", {"content": 70, "rhythm": 50}),
    ItemScores("i2", {"content": 60, "rhythm": 60}),
    ItemScores("i3", {"content": 80, "rhythm": 70}),
    ItemScores("i4", {"content": 50, "rhythm": 80}),
]

# by hand: dimension -> n, human mean (paired), judge mean, |error|, bias, MAE, Spearman, Pearson
SMALL_A = {
    "content": (4, 75.0, 82.0, 7.0, 7.0, 8.0, 1.0, 220 / math.sqrt(500 * 98)),
    "rhythm": (3, 60.0, 65.0, 5.0, 5.0, 25 / 3, -0.5, -0.5),
}
SMALL_B = {
    "content": (4, 75.0, 65.0, 10.0, -10.0, 10.0, 1.0, 1.0),
    "rhythm": (4, 65.0, 65.0, 0.0, 0.0, 0.0, 1.0, 1.0),
}


def _small(**kwargs: object) -> PollerAgreementRequest:
    options: dict[str, object] = {
        "human": HUMAN_SMALL,
        "systems": [ScoreSet("A", JUDGE_A), ScoreSet("B", JUDGE_B)],
        "dimensions": ["content", "rhythm"],
        "bootstrap": BootstrapOptions(resamples=500, seed=1),
    }
    options.update(kwargs)
    return PollerAgreementRequest(**options)  # type: ignore[arg-type]


@pytest.mark.parametrize(("system", "expected"), [(0, SMALL_A), (1, SMALL_B)])
def test_small_table_by_hand(system: int, expected: dict[str, tuple[float, ...]]) -> None:
    result = poller_agreement(_small())
    for d in result.systems[system].dimensions:
        got = (d.n, d.human_mean, d.judge_mean, d.abs_mean_error, d.bias, d.mae, d.spearman, d.pearson)
        assert got == pytest.approx(expected[d.dimension], abs=1e-9), d.dimension


def test_small_table_averages_and_reduction() -> None:
    result = poller_agreement(_small())
    a, b = result.systems
    assert (a.average.abs_mean_error, a.average.bias, a.average.mae) == pytest.approx((6.0, 6.0, (8 + 25 / 3) / 2))
    assert (b.average.abs_mean_error, b.average.bias, b.average.mae) == pytest.approx((5.0, -5.0, 5.0))
    assert a.average.n_pairs == 7 and b.average.n_pairs == 8
    (r,) = result.reductions
    per_dim = {d.dimension: d.reduction_percent for d in r.dimensions}
    assert per_dim == pytest.approx({"content": (7 - 10) / 7 * 100, "rhythm": 100.0})
    assert r.average.reduction_percent == pytest.approx((6 - 5) / 6 * 100)
    reverse = poller_agreement(_small(comparisons=[Comparison("B", "A")])).reductions[0]
    assert {d.dimension: d.reduction_percent for d in reverse.dimensions}["rhythm"] is None  # B's error is 0
    rows = {row.label: row.values for row in result.table.rows}
    assert rows["human"] == pytest.approx([75.0, 65.0, 70.0])  # every human score, not only the paired ones


def test_intervals_are_seeded_and_bracket_the_figure() -> None:
    first = poller_agreement(_small()).systems[0]
    again = poller_agreement(_small()).systems[0]
    other = poller_agreement(_small(bootstrap=BootstrapOptions(resamples=500, seed=2))).systems[0]
    assert first == again and first != other
    ci = first.dimensions[0].mae_ci
    assert ci is not None and ci.low <= 8.0 <= ci.high and ci.resamples == 500
    # resamples with fewer than three distinct pairs leave Spearman undefined: counted, not hidden
    rho_ci = first.dimensions[1].spearman_ci
    assert rho_ci is not None and rho_ci.undefined > 0


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"systems": [ScoreSet("A", JUDGE_A[:3])]}, "do not match the human items"),
        ({"systems": [ScoreSet("A", [*JUDGE_A, ItemScores("i9", {})])]}, "do not match"),
        ({"systems": [ScoreSet("A", JUDGE_A), ScoreSet("A", JUDGE_B)]}, "distinct"),
        ({"systems": []}, "give 1-20 systems"),
        ({"human": [*HUMAN_SMALL, HUMAN_SMALL[0]]}, "appears twice"),
        ({"human": [ItemScores("i1", {"beauty": 50})]}, "unknown dimension"),
        ({"human": [ItemScores("i1", {"content": 101})], "systems": [ScoreSet("A", [JUDGE_A[0]])]}, "not within"),
        ({"comparisons": [Comparison("A", "C")]}, "no system named 'C'"),
        ({"dimensions": ["content", "nope"]}, "unknown dimension"),
    ],
)
def test_bad_agreement_requests(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        poller_agreement(_small(**changes))
