"""MATA agreement against a hand-computed table: accuracy per source and category, kappa, alpha, confusion."""

from __future__ import annotations

import pytest

from service.companions.mata import MataAgreementRequest, RaterLabel, RaterLabels, mata_agreement
from service.core.metrics import BootstrapOptions
from service.platform.errors import InputError

WORDS = {"C": "correct", "I": "incorrect", "P": "partial"}


def _rater(name: str, letters: str, ids: list[str] | None = None) -> RaterLabels:
    ids = ids or [f"i{k + 1}" for k in range(len(letters))]
    return RaterLabels(name, [RaterLabel(i, WORDS[x]) for i, x in zip(ids, letters, strict=True)])  # type: ignore[arg-type]


JUDGE = _rater("llama", "CIIIIC")
H1 = _rater("h1", "CCICIC")
H2 = _rater("h2", "CCCCII")
CATEGORIES = {
    "i1": "reasoning",
    "i2": "reasoning",
    "i3": "reasoning",
    "i4": "grammar",
    "i5": "grammar",
    "i6": "grammar",
}


def _request(**kwargs: object) -> MataAgreementRequest:
    options: dict[str, object] = {
        "judge": JUDGE,
        "humans": [H1, H2],
        "categories": CATEGORIES,
        "bootstrap": BootstrapOptions(resamples=400, seed=5),
    }
    options.update(kwargs)
    return MataAgreementRequest(**options)  # type: ignore[arg-type]


def test_overall_figures_by_hand() -> None:
    result = mata_agreement(_request())
    overall = result.overall
    assert (result.n_items, result.raters, overall.n) == (6, ["llama", "h1", "h2"], 6)
    assert [a.source for a in overall.accuracy] == ["llama", "h1", "h2"]
    assert [a.accuracy for a in overall.accuracy] == pytest.approx([2 / 6, 4 / 6, 4 / 6])
    # positive harshness: the judge accepts fewer answers than the annotators
    assert [h.against for h in overall.harshness] == ["h1", "h2", "humans"]
    assert [h.value for h in overall.harshness] == pytest.approx([1 / 3, 1 / 3, 1 / 3])
    # kappa by hand: (p_o - p_e) / (1 - p_e) = (4/6 - 16/36) / (20/36), (2/6 - 16/36) / (20/36), (4/6 - 20/36) / (16/36)
    assert [(k.a, k.b) for k in overall.kappas] == [("llama", "h1"), ("llama", "h2"), ("h1", "h2")]
    assert [k.kappa for k in overall.kappas] == pytest.approx([0.4, -0.2, 0.25])
    # alpha by hand: o_CC = 6, o_II = 4, o_CI = o_IC = 4; n_C = 10, n_I = 8, n = 18: 1 - 17 * 8 / 160
    assert overall.alpha is not None and overall.alpha.alpha == pytest.approx(0.15)
    assert [(m.rows, m.columns, m.labels, m.counts) for m in result.confusion] == [
        ("llama", "h1", ["correct", "incorrect"], [[2, 0], [2, 2]]),
        ("llama", "h2", ["correct", "incorrect"], [[1, 1], [3, 1]]),
    ]


def test_per_category_by_hand() -> None:
    result = mata_agreement(_request())
    by_name = {c.category: c for c in result.categories}
    assert list(by_name) == ["grammar", "reasoning"]
    reasoning, grammar = by_name["reasoning"], by_name["grammar"]
    assert [a.accuracy for a in reasoning.accuracy] == pytest.approx([1 / 3, 2 / 3, 1.0])
    assert [a.accuracy for a in grammar.accuracy] == pytest.approx([1 / 3, 2 / 3, 1 / 3])
    assert reasoning.harshness[-1].value == pytest.approx(0.5) and grammar.harshness[1].value == pytest.approx(0.0)
    # h2 labels every reasoning item correct: p_e equals the judge's share of "correct", kappa 0
    assert reasoning.kappas[1].kappa == pytest.approx(0.0)


def test_partial_credit_counts_half() -> None:
    result = mata_agreement(
        MataAgreementRequest(judge=_rater("j", "PCI"), humans=[_rater("h", "CCP")], bootstrap=BootstrapOptions(seed=1))
    )
    assert [a.accuracy for a in result.overall.accuracy] == pytest.approx([0.5, 2.5 / 3])
    assert result.overall.alpha is None  # two raters: kappa, no alpha
    assert result.confusion[0].labels == ["correct", "incorrect", "partial"]
    assert result.confusion[0].counts == [[1, 0, 0], [0, 0, 1], [1, 0, 0]]


def test_intervals_are_seeded() -> None:
    first = mata_agreement(_request())
    assert first == mata_agreement(_request())
    assert first != mata_agreement(_request(bootstrap=BootstrapOptions(resamples=400, seed=6)))
    ci = first.overall.accuracy[0].ci
    assert ci is not None and ci.low <= 1 / 3 <= ci.high and ci.resamples == 400


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"humans": []}, "at least two raters"),
        ({"humans": [_rater("h1", "CCICI")]}, "item ids do not match"),
        ({"humans": [_rater("h1", "CCICIC", ["i1", "i2", "i3", "i4", "i5", "i9"])]}, "item ids do not match"),
        ({"humans": [_rater("llama", "CCICIC")]}, "distinct"),
        ({"humans": [_rater("h1", "CCICIC", ["i1", "i1", "i3", "i4", "i5", "i6"])]}, "appears twice"),
        ({"categories": {"i1": "x", "i99": "y"}}, "no rater labelled"),
        ({"judge": RaterLabels("llama", [])}, "give labels for"),
    ],
)
def test_bad_agreement_requests(changes: dict[str, object], message: str) -> None:
    with pytest.raises(InputError, match=message):
        mata_agreement(_request(**changes))
