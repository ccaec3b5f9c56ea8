"""The one fitting method (service.review.calibration.search) against hand-computed tables and synthetic data."""

from __future__ import annotations

import math

import numpy as np
import pytest

from service.core.risk import HardFlagRule
from service.core.types import Severity
from service.review.calibration.search import (
    CLIP,
    FitData,
    Search,
    Spec,
    build_model,
    figures,
    fitted_scores,
    grouped_folds,
    held_out_scores,
    nested_cv,
    nested_refusal,
    reference_stats,
    term_z,
)

TOL = 1e-5
MAD = 1.4826


@pytest.mark.parametrize(
    ("col", "stat", "centre", "scale"),
    [
        ([1, 2, 3, 4, 100], "robust", 3.0, MAD),  # |dev| 2,1,0,1,97: median 1
        ([1, math.nan, 3], "robust", 2.0, MAD),  # NaN (skipped) left out
        ([0, 0, 0, 0, 1], "robust", 0.0, math.sqrt(0.2)),  # MAD 0: the sd (ddof 1) instead
        ([5, 5, 5], "robust", 5.0, 1.0),  # constant: scale 1
        ([1, 2, 3, 10], "plain", 4.0, math.sqrt(50 / 3)),  # mean and sd (ddof 1), not the median
        ([7], "robust", 7.0, 1.0),  # one value: nothing to scale by
        ([], "plain", 0.0, 1.0),
    ],
)
def test_reference_stats(col: list[float], stat: str, centre: float, scale: float) -> None:
    got = reference_stats(np.asarray(col, dtype=float), stat)  # type: ignore[arg-type]
    assert got == pytest.approx((centre, scale), abs=TOL)


@pytest.mark.parametrize(
    ("clip", "expected"),
    [(5.0, [-2.0, 0.0, 5.0, 0.0]), (None, [-2.0, 0.0, 18.0, 0.0])],  # NaN (skipped) counts as the centre: z = 0
)
def test_term_z(clip: float | None, expected: list[float]) -> None:
    got = term_z(np.array([0.0, 1.0, 10.0, math.nan]), 1.0, 0.5, clip)
    assert got.tolist() == pytest.approx(expected, abs=TOL)


def test_grouped_folds_deal_whole_groups_round_robin() -> None:
    rng = np.random.default_rng(3)
    groups = [f"p{int(g)}" for g in rng.integers(0, 10, 200)]
    folds = grouped_folds(groups, 5, seed=11)
    per_group = {g: {int(f) for f, h in zip(folds, groups, strict=True) if h == g} for g in set(groups)}
    assert all(len(v) == 1 for v in per_group.values())  # no group split
    counts = np.bincount([next(iter(v)) for v in per_group.values()], minlength=5)
    assert counts.tolist() == [2, 2, 2, 2, 2]  # 10 groups dealt out in turn
    assert grouped_folds(groups, 5, seed=11).tolist() == folds.tolist()  # seeded: the same folds every time
    assert grouped_folds(groups, 5, seed=12).tolist() != folds.tolist()


# one signal 1..6 in three passages of two items; folds by passage
X6 = FitData(
    names=["s"],
    x=np.arange(1.0, 7.0)[:, None],
    y=np.array([False, False, False, False, True, True]),
    groups=np.array(["a", "a", "b", "b", "c", "c"]),
    forced=(None,) * 6,
)
FOLDS6 = np.array([0, 0, 1, 1, 2, 2])


def test_held_out_scores_use_the_training_folds_only() -> None:
    # fold 0 trains on 3..6 (median 4.5, MAD 1), fold 1 on 1,2,5,6 (median 3.5, MAD 2), fold 2 on 1..4 (2.5, 1)
    expected = [-3.5 / MAD, -2.5 / MAD, -0.5 / (2 * MAD), 0.5 / (2 * MAD), 2.5 / MAD, 3.5 / MAD]
    got = held_out_scores(Spec((("s", 1.0),), clip=None), X6, FOLDS6)
    assert got.tolist() == pytest.approx(expected, abs=TOL)
    # in-sample: median 3.5, MAD 1.5 * 1.4826 over all six
    assert fitted_scores(Spec((("s", 2.0),), clip=None), X6).tolist() == pytest.approx(
        [2 * (v - 3.5) / (1.5 * MAD) for v in range(1, 7)], abs=TOL
    )


def _ranked(scores: list[float], y: list[int], forced: list[Severity | None]) -> FitData:
    n = len(scores)
    return FitData(["s"], np.asarray(scores)[:, None], np.asarray(y, dtype=bool), np.arange(n), tuple(forced))


@pytest.mark.parametrize(
    ("scores", "y", "forced", "recall_at_25", "auc"),
    [
        # the forced positive has the lowest score yet is reviewed first
        ([0.9, 0.1, 0.5, 0.2], [0, 1, 0, 0], [None, "major", None, None], 1.0, 1.0),
        # between forced candidates the severity decides before the score: critical 0.1 above major 0.9
        ([0.1, 0.9, 0.5, 0.0], [1, 0, 0, 0], ["critical", "major", None, None], 1.0, 1.0),
        ([0.1, 0.9, 0.5, 0.0], [0, 1, 0, 0], ["critical", "major", None, None], 0.0, 2 / 3),
        ([0.9, 0.1, 0.5, 0.2], [0, 1, 0, 0], [None] * 4, 0.0, 0.0),
    ],
)
def test_fit_figures_rank_in_the_one_ranking(
    scores: list[float], y: list[int], forced: list[Severity | None], recall_at_25: float, auc: float
) -> None:
    data = _ranked(scores, y, forced)
    fig = figures(np.asarray(scores), data, (0.25,))
    assert fig["recall@25%"] == pytest.approx(recall_at_25) and fig["auc"] == pytest.approx(auc, abs=1e-4)  # 4 places
    # the selection key ranks the same way (one fold: no training part, z is the raw value)
    key = Search(data, np.zeros(4, dtype=int), budget=0.25).evaluate(Spec((("s", 1.0),), clip=None))
    assert key == pytest.approx((recall_at_25, auc))


def _synthetic(n_groups: int, seed: int = 0) -> FitData:
    """Three items per group; ``good`` tracks the label, ``noise`` and ``weak`` (a little) do not."""
    rng = np.random.default_rng(seed)
    n = 3 * n_groups
    y = rng.random(n) < 0.25
    good = y * 2.0 + rng.normal(0, 0.6, n)
    weak = y * 0.3 + rng.normal(0, 1.0, n)
    noise = rng.normal(0, 1.0, n)
    x = np.stack([noise, weak, good], axis=1)
    return FitData(["noise", "weak", "good"], x, y, np.repeat(np.arange(n_groups), 3), (None,) * n)


def test_search_chooses_the_signal_that_tracks_the_label() -> None:
    data = _synthetic(60)
    folds = grouped_folds(data.groups, 5)
    selection = Search(data, folds).select(data.names, simplify=True)
    assert selection.chosen.terms[0][0] == "good"
    assert max(selection.chosen.terms, key=lambda t: t[1])[0] == "good"
    assert sum(w for _, w in selection.chosen.terms) == pytest.approx(1.0, abs=1e-3)
    # prefer-simpler keeps a leading part of the full spec
    assert selection.full.terms[: len(selection.chosen.terms)][0][0] == "good"


def test_prefer_simpler_keeps_what_the_figures_need() -> None:
    rng = np.random.default_rng(5)
    n = 240
    kind = rng.integers(0, 4, n)  # 0: an error only signal a sees, 1: only b sees, 2-3: fine
    a = (kind == 0) * 2.5 + rng.normal(0, 0.5, n)
    b = (kind == 1) * 2.5 + rng.normal(0, 0.5, n)
    noise = rng.normal(0, 1.0, n)
    data = FitData(["a", "b", "noise"], np.stack([a, b, noise], 1), kind < 2, np.arange(n) // 3, (None,) * n)
    search = Search(data, grouped_folds(data.groups, 5))
    # either signal alone finds half of the errors: the two-term spec stays
    assert {t[0] for t in search.select(data.names, simplify=True).chosen.terms} >= {"a", "b"}
    # a term that adds nothing is cut, and the rest renormalised
    assert search.prefer_simpler(Spec((("a", 0.4), ("b", 0.4), ("noise", 0.2)))).terms[-1][0] != "noise"


def test_select_simplifies_only_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    shorter = Spec((("good", 1.0),), clip=None)
    monkeypatch.setattr(Search, "prefer_simpler", lambda self, spec: shorter)
    search = Search(_synthetic(30), grouped_folds(np.repeat(np.arange(30), 3), 5))
    assert search.select(["good", "noise"], simplify=True).chosen is shorter
    plain = search.select(["good", "noise"], simplify=False)
    assert plain.chosen is plain.full and plain.full is not shorter


def test_nested_cv_reruns_the_selection_per_outer_fold() -> None:
    data = _synthetic(60)
    folds = grouped_folds(data.groups, 5)
    assert nested_refusal(data, folds, 5) is None
    nested = nested_cv(data, folds, data.names, n_folds=5, simplify=True)
    assert len(nested.specs) == 5 and all(s.terms[0][0] == "good" for s in nested.specs)
    assert figures(nested.scores, data)["auc"] > 0.8  # type: ignore[operator]


def test_nested_refusal_names_the_shortfall() -> None:
    small = _synthetic(6)
    reason = nested_refusal(small, grouped_folds(small.groups, 5), 5)
    assert reason is not None and "the inner CV needs 5" in reason
    one_class = FitData(
        ["s"], np.arange(40.0)[:, None], np.arange(40) < 4, np.arange(40) // 2, (None,) * 40
    )  # every positive in groups 0 and 1, which a layout of 2 folds can put together
    folds = np.where(np.arange(40) < 4, 0, 1)
    assert "only one class" in str(nested_refusal(one_class, folds, 2))


def test_build_model_stores_the_statistics_and_in_sample_reference() -> None:
    data = _synthetic(20)
    spec = Spec((("good", 0.75), ("noise", 0.25)))
    model = build_model(
        spec,
        data,
        name="m",
        version="1.0.0",
        description="d",
        fallback=None,
        hard_flags=HardFlagRule(),
        reference_data="synthetic",
        reference_label="in-sample",
        fit={"k": 1},
    )
    for term, (name, w) in zip(model.signals, spec.terms, strict=True):
        mean, sd = reference_stats(data.column(name))
        assert (term.name, term.weight, term.clip) == (name, w, CLIP)
        assert (term.mean, term.sd) == (round(mean, 6), round(sd, 6))
    assert model.reference is not None and model.reference.n == 60 and len(model.reference.quantiles) == 1001
    q = np.quantile(fitted_scores(spec, data), [0.0, 0.5, 1.0])
    assert [model.reference.quantiles[i] for i in (0, 500, 1000)] == pytest.approx(q.tolist(), abs=1e-6)
    assert model.requires_peers is False and model.fit == {"k": 1}


def test_an_objective_decides_the_selection_and_sees_the_rows_tags() -> None:
    # signal "a" ranks the outliers, signal "b" ranks the rows tagged "injected": the default objective (recall,
    # AUC over y) picks "a"; an objective over the tagged rows picks "b", also inside a nested CV (rows subset)
    rng = np.random.default_rng(11)
    n = 400
    y = rng.random(n) < 0.3
    tags = np.where(rng.random(n) < 0.2, "injected", "untouched")
    a = y * 2.0 + rng.normal(0, 0.5, n)
    b = (tags == "injected") * 2.0 + rng.normal(0, 0.5, n)
    data = FitData(["a", "b"], np.stack([a, b], axis=1), y, np.arange(n) % 40, (None,) * n, tags)
    folds = grouped_folds(data.groups, 5)

    def injected_on_top(s: np.ndarray, d: FitData) -> tuple[float, float]:
        assert d.tags is not None and d.tags.shape == s.shape
        top = s >= np.quantile(s[d.tags == "untouched"], 0.9)
        return (round(float(top[d.tags == "injected"].mean()), 4), 0.0)

    assert Search(data, folds).greedy(["a", "b"]).terms[0][0] == "a"
    chosen = Search(data, folds, objective=injected_on_top).greedy(["a", "b"])
    assert chosen.terms[0][0] == "b"
    nested = nested_cv(data, folds, ["a", "b"], n_folds=5, simplify=False, objective=injected_on_top)
    assert all(spec.terms[0][0] == "b" for spec in nested.specs)
