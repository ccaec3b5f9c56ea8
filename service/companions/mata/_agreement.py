"""Agreement of a MATA judge with human annotators: accuracy per source and category, kappa, alpha, harshness.

Every rater (the judge and each annotator) labels the same items ``correct``, ``incorrect`` or ``partial``.

| figure              | definition                                                                            |
|---------------------|---------------------------------------------------------------------------------------|
| accuracy of a source| mean credit of its labels: correct 1, partial 0.5, incorrect 0 (the research's table) |
| harshness           | an annotator's accuracy (or the annotators' mean) minus the judge's: positive = the   |
|                     | judge accepts fewer answers than the humans                                            |
| kappa               | Cohen's kappa (``service.core.metrics.cohen_kappa``) judge vs each annotator and       |
|                     | between annotators                                                                     |
| alpha               | Krippendorff's nominal alpha over all raters, when there are more than two            |
| confusion           | judge labels (rows) against each annotator's (columns)                                 |

Per category (when the request maps items to categories) and overall; intervals are seeded percentile
bootstraps over the items (``BootstrapOptions``), every figure of a category on the same draws.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import msgspec
import numpy as np

from service.core.metrics import (
    BootstrapOptions,
    Interval,
    bootstrap_interval,
    cohen_kappa_rows,
    krippendorff_alpha_nominal,
    krippendorff_alpha_nominal_rows,
)
from service.platform.errors import InputError

__all__ = [
    "CREDIT",
    "LABELS",
    "AlphaFigure",
    "CategoryAgreement",
    "ConfusionMatrix",
    "Harshness",
    "KappaPair",
    "Label",
    "MataAgreement",
    "MataAgreementRequest",
    "RaterLabel",
    "RaterLabels",
    "SourceAccuracy",
    "mata_agreement",
]

Label = Literal["correct", "incorrect", "partial"]
LABELS: tuple[Label, ...] = ("correct", "incorrect", "partial")
CREDIT: dict[str, float] = {"correct": 1.0, "partial": 0.5, "incorrect": 0.0}
MAX_AGREEMENT_ITEMS = 10_000
MAX_ANNOTATORS = 20


class RaterLabel(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    item_id: str
    label: Label


class RaterLabels(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    rater: str
    labels: list[RaterLabel]


class MataAgreementRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """The judge's verdicts and at least one annotator's labels on the same items; categories by item id."""

    judge: RaterLabels
    humans: list[RaterLabels]
    categories: dict[str, str] | None = None
    bootstrap: BootstrapOptions = BootstrapOptions()


class SourceAccuracy(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    source: str
    accuracy: float
    ci: Interval | None


class Harshness(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``against`` is an annotator, or "humans" for the annotators' mean accuracy."""

    against: str
    value: float
    ci: Interval | None


class KappaPair(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    a: str
    b: str
    kappa: float | None
    ci: Interval | None


class AlphaFigure(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    raters: list[str]
    alpha: float | None
    ci: Interval | None


class CategoryAgreement(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One category's figures ("all" = every item)."""

    category: str
    n: int
    accuracy: list[SourceAccuracy]
    harshness: list[Harshness]
    kappas: list[KappaPair]
    alpha: AlphaFigure | None


class ConfusionMatrix(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    rows: str
    columns: str
    labels: list[str]
    counts: list[list[int]]


class MataAgreement(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    n_items: int
    raters: list[str]
    overall: CategoryAgreement
    categories: list[CategoryAgreement]
    confusion: list[ConfusionMatrix]
    bootstrap: BootstrapOptions


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _validate(request: MataAgreementRequest) -> tuple[list[str], list[str], np.ndarray]:
    """Rater names, item ids (the judge's order) and a (raters x items) array of label codes."""
    raters = [request.judge, *request.humans]
    if not request.humans:
        raise InputError("agreement needs at least two raters: the judge and one or more annotators")
    if len(request.humans) > MAX_ANNOTATORS:
        raise InputError(f"humans: at most {MAX_ANNOTATORS} annotators", extra={"limit": MAX_ANNOTATORS})
    names = [r.rater for r in raters]
    if any(not n.strip() for n in names) or len(set(names)) != len(names):
        raise InputError("every rater needs a distinct, non-empty name")
    ids = [label.item_id for label in request.judge.labels]
    if not ids or len(ids) > MAX_AGREEMENT_ITEMS:
        raise InputError(f"judge: give labels for 1-{MAX_AGREEMENT_ITEMS} items", extra={"limit": MAX_AGREEMENT_ITEMS})
    order = {item_id: i for i, item_id in enumerate(ids)}
    codes = np.zeros((len(raters), len(ids)), dtype=np.int64)
    for r, rater in enumerate(raters):
        mine = [label.item_id for label in rater.labels]
        if len(set(mine)) != len(mine):
            raise InputError(f"rater {rater.rater!r}: an item id appears twice")
        if set(mine) != set(ids):
            raise InputError(
                f"rater {rater.rater!r}: item ids do not match the judge's",
                extra={"missing": sorted(set(ids) - set(mine))[:10], "unexpected": sorted(set(mine) - set(ids))[:10]},
            )
        for label in rater.labels:
            codes[r, order[label.item_id]] = LABELS.index(label.label)
    if request.categories is not None:
        unknown = sorted(set(request.categories) - set(ids))
        if unknown:
            raise InputError("categories: item ids that no rater labelled", extra={"unexpected": unknown[:10]})
    return names, ids, codes


_Vectorized = Callable[[np.ndarray], np.ndarray]


def _category(name: str, names: list[str], codes: np.ndarray, options: BootstrapOptions) -> CategoryAgreement:
    n = codes.shape[1]
    credit = np.array([CREDIT[label] for label in LABELS])[codes]  # raters x items

    # statistics over a (resamples x n) matrix of item draws, one value per resample
    def accuracy(r: int) -> _Vectorized:
        return lambda draws: credit[r][draws].mean(axis=1)

    def harsh(h: list[int]) -> _Vectorized:
        return lambda draws: credit[h][:, draws].mean(axis=(0, 2)) - credit[0][draws].mean(axis=1)

    def kappa(a: int, b: int) -> _Vectorized:
        return lambda draws: cohen_kappa_rows(codes[a][draws], codes[b][draws], len(LABELS))

    def figure(fn: _Vectorized) -> tuple[float, Interval | None]:
        return float(fn(np.arange(n)[None, :])[0]), bootstrap_interval(n, fn, options, vectorized=True)

    accuracies = []
    for r, rater in enumerate(names):
        value, ci = figure(accuracy(r))
        accuracies.append(SourceAccuracy(rater, value, ci))
    humans = list(range(1, len(names)))
    harshness = []
    for h in humans:
        value, ci = figure(harsh([h]))
        harshness.append(Harshness(names[h], value, ci))
    if len(humans) > 1:
        value, ci = figure(harsh(humans))
        harshness.append(Harshness("humans", value, ci))
    kappas = []
    pairs = [(0, h) for h in humans] + [(a, b) for a in humans for b in humans if a < b]
    for a, b in pairs:
        value, ci = figure(kappa(a, b))
        kappas.append(KappaPair(names[a], names[b], _num(value), ci if _num(value) is not None else None))
    alpha = None
    if len(names) > 2:
        units = [[LABELS[int(c)] for c in codes[:, i]] for i in range(n)]
        alpha_value = _num(krippendorff_alpha_nominal(units))
        alpha_ci = None
        if alpha_value is not None:
            alpha_ci = bootstrap_interval(
                n, lambda d: krippendorff_alpha_nominal_rows(units, d), options, vectorized=True
            )
        alpha = AlphaFigure(names, alpha_value, alpha_ci)
    return CategoryAgreement(name, n, accuracies, harshness, kappas, alpha)


def _confusion(names: list[str], codes: np.ndarray) -> list[ConfusionMatrix]:
    used = sorted({int(c) for c in codes.ravel()})
    labels: list[str] = [LABELS[c] for c in used]
    out = []
    for h in range(1, len(names)):
        counts = [[int(((codes[0] == a) & (codes[h] == b)).sum()) for b in used] for a in used]
        out.append(ConfusionMatrix(rows=names[0], columns=names[h], labels=labels, counts=counts))
    return out


def mata_agreement(request: MataAgreementRequest) -> MataAgreement:
    """The figures of the module docstring; InputError for fewer than two raters or mismatched item ids."""
    names, ids, codes = _validate(request)
    options = request.bootstrap
    categories: list[CategoryAgreement] = []
    if request.categories:
        by_category: dict[str, list[int]] = {}
        for i, item_id in enumerate(ids):
            category = request.categories.get(item_id)
            if category is not None:
                by_category.setdefault(category, []).append(i)
        for category in sorted(by_category):
            categories.append(_category(category, names, codes[:, by_category[category]], options))
    return MataAgreement(
        n_items=len(ids),
        raters=names,
        overall=_category("all", names, codes, options),
        categories=categories,
        confusion=_confusion(names, codes),
        bootstrap=options,
    )
