"""Agreement of Poller judges with the authors' (human) scores, laid out like the research's table, and more.

Per system (a judge or strategy) and dimension, over the items where both the system and the humans scored it:

| figure            | definition                                                                         |
|-------------------|------------------------------------------------------------------------------------|
| abs_mean_error    | abs(mean of system scores - mean of human scores): the research's measure          |
| bias              | mean of (system - human): signed; positive = the judge scores higher               |
| mae               | mean of abs(system - human) per item: what abs_mean_error hides                    |
| spearman, pearson | correlation across items (None below 3 items or with a constant side)              |

The "average" of abs_mean_error, bias and mae is the mean of the per-dimension values (so the research's average
error 14.38 is the mean of eight absolute errors, not the error of the mean score); its correlations are pooled
over every (item, dimension) pair. The error reduction of a system against a baseline is
(baseline error - system error) / baseline error x 100, from unrounded errors, per dimension and for the average
(None when the baseline error is 0). Intervals are percentile bootstraps over items (all dimensions of an item
together, systems paired), seeded (``BootstrapOptions``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence

import msgspec
import numpy as np

from service.companions.poller._dimensions import DEFAULT_DIMENSIONS, resolve_dimensions
from service.core.metrics import BootstrapOptions, Interval, bootstrap_interval, pearson_rows, spearman_rows
from service.platform.errors import InputError

__all__ = [
    "MIN_CORRELATION_ITEMS",
    "AgreementTable",
    "AverageAgreement",
    "Comparison",
    "DimensionAgreement",
    "DimensionReduction",
    "ItemScores",
    "PollerAgreement",
    "PollerAgreementRequest",
    "Reduction",
    "ScoreSet",
    "SystemAgreement",
    "TableRow",
    "poller_agreement",
]

MIN_CORRELATION_ITEMS = 3
MAX_AGREEMENT_ITEMS = 10_000
MAX_SYSTEMS = 20


class ItemScores(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Scores of one item (an interpretation) by dimension name; a dimension left out was not scored."""

    item_id: str
    scores: dict[str, float]


class ScoreSet(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One system's scores (e.g. "gpt-4-turbo P3"); its item ids must be exactly the humans' item ids."""

    name: str
    items: list[ItemScores]


class Comparison(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    baseline: str
    system: str


class PollerAgreementRequest(msgspec.Struct, forbid_unknown_fields=True, frozen=True, kw_only=True):
    """Human (author) scores and one or more systems; ``comparisons`` default to every system against the first."""

    human: list[ItemScores]
    systems: list[ScoreSet]
    dimensions: list[str] | None = None
    comparisons: list[Comparison] | None = None
    bootstrap: BootstrapOptions = BootstrapOptions()


class DimensionAgreement(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    dimension: str
    n: int
    human_mean: float | None
    judge_mean: float | None
    abs_mean_error: float | None
    abs_mean_error_ci: Interval | None
    bias: float | None
    bias_ci: Interval | None
    mae: float | None
    mae_ci: Interval | None
    spearman: float | None
    spearman_ci: Interval | None
    pearson: float | None
    pearson_ci: Interval | None


class AverageAgreement(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Means over the dimensions with data (``n_dimensions``); correlations pooled over (item, dimension) pairs."""

    n_dimensions: int
    n_pairs: int
    human_mean: float | None
    judge_mean: float | None
    abs_mean_error: float | None
    abs_mean_error_ci: Interval | None
    bias: float | None
    bias_ci: Interval | None
    mae: float | None
    mae_ci: Interval | None
    spearman: float | None
    spearman_ci: Interval | None
    pearson: float | None
    pearson_ci: Interval | None


class SystemAgreement(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    system: str
    dimensions: list[DimensionAgreement]
    average: AverageAgreement


class DimensionReduction(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """``dimension`` is a dimension name or "average"."""

    dimension: str
    baseline_error: float | None
    system_error: float | None
    reduction_percent: float | None
    reduction_ci: Interval | None


class Reduction(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    baseline: str
    system: str
    dimensions: list[DimensionReduction]
    average: DimensionReduction


class TableRow(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    label: str
    values: list[float | None]


class AgreementTable(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The research's layout: mean scores (human, each system), each system's error, each reduction in %."""

    columns: list[str]
    rows: list[TableRow]


class PollerAgreement(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    n_items: int
    dimensions: list[str]
    systems: list[SystemAgreement]
    reductions: list[Reduction]
    table: AgreementTable
    bootstrap: BootstrapOptions


def _num(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


def _matrix(items: Sequence[ItemScores], order: dict[str, int], dims: list[str], who: str) -> np.ndarray:
    out = np.full((len(order), len(dims)), np.nan)
    column = {d: j for j, d in enumerate(dims)}
    known = set(DEFAULT_DIMENSIONS)
    for item in items:
        row = order[item.item_id]
        for name, value in item.scores.items():
            if name not in known:
                raise InputError(f"{who}: unknown dimension {name!r}", extra={"known": list(DEFAULT_DIMENSIONS)})
            if not (math.isfinite(value) and 0.0 <= value <= 100.0):
                raise InputError(f"{who}: item {item.item_id!r}, {name}: score {value} is not within 0-100")
            if name in column:
                out[row, column[name]] = value
    return out


def _ids(items: Sequence[ItemScores], who: str) -> list[str]:
    ids = [i.item_id for i in items]
    if len(set(ids)) != len(ids):
        raise InputError(f"{who}: an item id appears twice")
    return ids


# --- statistics over index draws (rows of items); every function accepts a (resamples x n) matrix -------------------


def _masked_means(values: np.ndarray, mask: np.ndarray) -> np.ndarray:
    count = mask.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, np.where(mask, values, 0.0).sum(axis=-1) / np.maximum(count, 1), np.nan)


class _Pair:
    """One system against the humans on one dimension column (or all columns, flattened, for pooling)."""

    def __init__(self, system: np.ndarray, human: np.ndarray) -> None:
        self.system = np.nan_to_num(system)
        self.human = np.nan_to_num(human)
        self.mask = np.isfinite(system) & np.isfinite(human)

    def abs_mean_error(self, draws: np.ndarray) -> np.ndarray:
        m = self.mask[draws]
        return np.abs(_masked_means(self.system[draws], m) - _masked_means(self.human[draws], m))

    def bias(self, draws: np.ndarray) -> np.ndarray:
        return _masked_means(self.system[draws] - self.human[draws], self.mask[draws])

    def mae(self, draws: np.ndarray) -> np.ndarray:
        return _masked_means(np.abs(self.system[draws] - self.human[draws]), self.mask[draws])

    def correlation(self, draws: np.ndarray, kind: str) -> np.ndarray:
        rows = draws.shape[0]
        a = self.system[draws].reshape(rows, -1)  # a pooled pair's (item, dimension) values flatten per resample
        b = self.human[draws].reshape(rows, -1)
        m = self.mask[draws].reshape(rows, -1)
        r = spearman_rows(a, b, m) if kind == "spearman" else pearson_rows(a, b, m)
        return np.where(m.sum(axis=1) >= MIN_CORRELATION_ITEMS, r, np.nan)


def _average(pairs: list[_Pair], metric: str, draws: np.ndarray) -> np.ndarray:
    values = np.stack([getattr(p, metric)(draws) for p in pairs])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a resample may leave every dimension undefined
        return np.asarray(np.nanmean(values, axis=0))


_Vectorized = Callable[[np.ndarray], np.ndarray]


def _figure(fn: _Vectorized, n: int, options: BootstrapOptions) -> tuple[float | None, Interval | None]:
    """The value on the items as given (one draw: every item once) and its bootstrap interval."""
    value = _num(float(np.asarray(fn(np.arange(n)[None, :])).reshape(-1)[0]))
    if value is None:
        return None, None
    return value, bootstrap_interval(n, fn, options, vectorized=True)


def _correlation(pair: _Pair, kind: str, n: int, options: BootstrapOptions) -> tuple[float | None, Interval | None]:
    def fn(draws: np.ndarray) -> np.ndarray:
        return pair.correlation(draws, kind)

    return _figure(fn, n, options)


def _system(
    name: str, values: np.ndarray, human: np.ndarray, dims: list[str], options: BootstrapOptions
) -> tuple[SystemAgreement, list[_Pair]]:
    n = human.shape[0]
    pairs = [_Pair(values[:, j], human[:, j]) for j in range(len(dims))]
    rows: list[DimensionAgreement] = []
    for j, dim in enumerate(dims):
        pair = pairs[j]
        m = pair.mask
        ame, ame_ci = _figure(pair.abs_mean_error, n, options)
        bias, bias_ci = _figure(pair.bias, n, options)
        mae, mae_ci = _figure(pair.mae, n, options)
        rho, rho_ci = _correlation(pair, "spearman", n, options)
        r, r_ci = _correlation(pair, "pearson", n, options)
        rows.append(
            DimensionAgreement(
                dimension=dim,
                n=int(m.sum()),
                human_mean=_num(float(human[m, j].mean())) if m.any() else None,
                judge_mean=_num(float(values[m, j].mean())) if m.any() else None,
                abs_mean_error=ame,
                abs_mean_error_ci=ame_ci,
                bias=bias,
                bias_ci=bias_ci,
                mae=mae,
                mae_ci=mae_ci,
                spearman=rho,
                spearman_ci=rho_ci,
                pearson=r,
                pearson_ci=r_ci,
            )
        )
    with_data = [p for p in pairs if p.mask.any()]
    pooled = _Pair(values, human)
    figures: dict[str, tuple[float | None, Interval | None]] = {}
    for metric in ("abs_mean_error", "bias", "mae"):

        def fn(d: np.ndarray, metric: str = metric) -> np.ndarray:
            return _average(with_data, metric, d)

        figures[metric] = _figure(fn, n, options) if with_data else (None, None)
    human_means = [r.human_mean for r in rows if r.human_mean is not None]
    judge_means = [r.judge_mean for r in rows if r.judge_mean is not None]
    rho, rho_ci = _correlation(pooled, "spearman", n, options)
    r, r_ci = _correlation(pooled, "pearson", n, options)
    average = AverageAgreement(
        n_dimensions=len(with_data),
        n_pairs=int(pooled.mask.sum()),
        human_mean=float(np.mean(human_means)) if human_means else None,
        judge_mean=float(np.mean(judge_means)) if judge_means else None,
        abs_mean_error=figures["abs_mean_error"][0],
        abs_mean_error_ci=figures["abs_mean_error"][1],
        bias=figures["bias"][0],
        bias_ci=figures["bias"][1],
        mae=figures["mae"][0],
        mae_ci=figures["mae"][1],
        spearman=rho,
        spearman_ci=rho_ci,
        pearson=r,
        pearson_ci=r_ci,
    )
    return SystemAgreement(name, rows, average), pairs


def _reduction_fn(base: list[_Pair], system: list[_Pair]) -> _Vectorized:
    def fn(draws: np.ndarray) -> np.ndarray:
        b = _average(base, "abs_mean_error", draws)
        s = _average(system, "abs_mean_error", draws)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(b > 0, (b - s) / b * 100.0, np.nan)

    return fn


def _reduction(
    label: str,
    base: list[_Pair],
    system: list[_Pair],
    b_err: float | None,
    s_err: float | None,
    n: int,
    options: BootstrapOptions,
) -> DimensionReduction:
    """The reduction from the same statistic as its interval (None when the baseline error is 0 or missing)."""
    if b_err is None or s_err is None or not base or not system:
        return DimensionReduction(label, b_err, s_err, None, None)
    value, ci = _figure(_reduction_fn(base, system), n, options)
    return DimensionReduction(label, b_err, s_err, value, ci)


def poller_agreement(request: PollerAgreementRequest) -> PollerAgreement:
    """The agreement figures and table; InputError for mismatched ids, unknown dimensions or systems, bad scores."""
    dims: list[str] = [d.name for d in resolve_dimensions(request.dimensions)]
    if not request.human:
        raise InputError("human: give the human scores of at least one item")
    if len(request.human) > MAX_AGREEMENT_ITEMS:
        raise InputError(f"human: at most {MAX_AGREEMENT_ITEMS} items", extra={"limit": MAX_AGREEMENT_ITEMS})
    if not request.systems or len(request.systems) > MAX_SYSTEMS:
        raise InputError(f"systems: give 1-{MAX_SYSTEMS} systems", extra={"limit": MAX_SYSTEMS})
    names = [s.name for s in request.systems]
    if len(set(names)) != len(names) or any(not n.strip() for n in names):
        raise InputError("systems: every system needs a distinct, non-empty name")
    human_ids = _ids(request.human, "human")
    order = {item_id: i for i, item_id in enumerate(human_ids)}
    human = _matrix(request.human, order, dims, "human")
    matrices: dict[str, np.ndarray] = {}
    for system in request.systems:
        ids = _ids(system.items, system.name)
        if set(ids) != set(human_ids):
            missing = sorted(set(human_ids) - set(ids))[:10]
            extra = sorted(set(ids) - set(human_ids))[:10]
            raise InputError(
                f"system {system.name!r}: item ids do not match the human items",
                extra={"missing": missing, "unexpected": extra},
            )
        matrices[system.name] = _matrix(system.items, order, dims, system.name)
    comparisons = request.comparisons
    if comparisons is None:
        comparisons = [Comparison(names[0], other) for other in names[1:]]
    for c in comparisons:
        for name in (c.baseline, c.system):
            if name not in matrices:
                raise InputError(f"comparisons: no system named {name!r}", extra={"systems": names})
    options = request.bootstrap
    n = len(human_ids)
    results: dict[str, SystemAgreement] = {}
    pairs: dict[str, list[_Pair]] = {}
    for name in names:
        results[name], pairs[name] = _system(name, matrices[name], human, dims, options)
    reductions = []
    for c in comparisons:
        base, mine = results[c.baseline], results[c.system]
        per_dim = [
            _reduction(
                d, [pairs[c.baseline][j]], [pairs[c.system][j]], bd.abs_mean_error, md.abs_mean_error, n, options
            )
            for j, (d, bd, md) in enumerate(zip(dims, base.dimensions, mine.dimensions, strict=True))
        ]
        with_data = [j for j in range(len(dims)) if pairs[c.baseline][j].mask.any() and pairs[c.system][j].mask.any()]
        average = _reduction(
            "average",
            [pairs[c.baseline][j] for j in with_data],
            [pairs[c.system][j] for j in with_data],
            base.average.abs_mean_error,
            mine.average.abs_mean_error,
            n,
            options,
        )
        reductions.append(Reduction(c.baseline, c.system, per_dim, average))
    ordered = [results[name] for name in names]
    return PollerAgreement(n, dims, ordered, reductions, _table(dims, human, ordered, reductions), options)


def _table(
    dims: list[str], human: np.ndarray, systems: list[SystemAgreement], reductions: list[Reduction]
) -> AgreementTable:
    """Mean rows use every score of that row's rater; error rows are over the items both scored."""
    rows: list[TableRow] = []
    human_means = [
        _num(float(np.nanmean(human[:, j]))) if np.isfinite(human[:, j]).any() else None for j in range(len(dims))
    ]
    defined = [m for m in human_means if m is not None]
    rows.append(TableRow("human", [*human_means, float(np.mean(defined)) if defined else None]))
    for s in systems:
        rows.append(TableRow(s.system, [d.judge_mean for d in s.dimensions] + [s.average.judge_mean]))
    for s in systems:
        errors = [d.abs_mean_error for d in s.dimensions] + [s.average.abs_mean_error]
        rows.append(TableRow(f"{s.system} |error|", errors))
    for r in reductions:
        values = [d.reduction_percent for d in r.dimensions] + [r.average.reduction_percent]
        rows.append(TableRow(f"reduction % {r.system} vs {r.baseline}", values))
    return AgreementTable(columns=[*dims, "average"], rows=rows)
