"""The one method that fits risk models: z-scored linear terms chosen by cross-validation grouped by passage.

Used by the calibration API (reviewer verdicts, ``fit.fit_risk_model``) and by ``bench/fit_risk.py`` (the shipped
models, PaliBench dev). It works on arrays: a signal matrix, binary labels, a group per item and the forcing
severity of each item under the hard-flag rule the fitted model will carry.

- **Folds**: whole groups (passages, or suttas, which contain passages) go to one fold, by a seeded shuffle of the
  sorted group labels dealt out round-robin, so no passage is split and the same data always gives the same folds.
- **Terms**: ``weight * clip((value - centre) / scale, +-CLIP)``, a skipped signal counting as its centre (z = 0,
  as ``service.core.risk.score`` does). Robust statistics (median, 1.4826 MAD; the sd when the MAD is 0) fitted on
  the training part only; ``plain`` (mean, sd) for the research's fixed routing rule.
- **Ranking**: held-out scores are ranked as the service ranks them (``service.core.ranking.priorities``: forcing
  flags by severity first, then the score), so the figures are those of the order a reviewer would see.
- **Selection** (the objective is held-out recall at the budget, rounded to 4 places, then AUC): forward selection
  (the first term at weight 1, each new term at 1/4, 1/2 or 1x; stop when no addition gains ``MIN_GAIN`` on either
  figure; at most ``MAX_TERMS``), then a 0.5x/2x coordinate search of the weights, then optionally the shortest
  leading part of the terms within ``SIMPLER_MARGIN`` of the full set on both figures.
- **Nested CV**: the whole selection re-run inside each outer fold (inner folds seeded ``seed + 1 + k``), the honest
  estimate of what the procedure finds on unseen passages.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from service.core.budget import DEFAULT_BUDGET
from service.core.metrics import DEFAULT_BUDGETS, auc, budget_stats, recall_at_budget
from service.core.ranking import priorities
from service.core.risk import HardFlagRule, ReferenceDistribution, RiskModel, SignalWeight
from service.core.signals import PEER_SIGNALS
from service.core.types import Severity

__all__ = [
    "CLIP",
    "MAX_TERMS",
    "MIN_GAIN",
    "SEED",
    "SIMPLER_MARGIN",
    "FitData",
    "Nested",
    "Objective",
    "Search",
    "Selection",
    "Spec",
    "Stat",
    "build_model",
    "figures",
    "fitted_scores",
    "folds_description",
    "grouped_folds",
    "held_out_scores",
    "nested_cv",
    "nested_refusal",
    "reference_stats",
    "score_terms",
    "selection_description",
    "term_z",
]

SEED = 20260101
CLIP = 5.0  # |z| cap of every fitted term (a 40x loop should not outweigh everything else)
MAX_TERMS = 5
MIN_GAIN = 0.005  # a step must gain this much recall or AUC, so noise does not add terms or move weights
SIMPLER_MARGIN = 0.01  # a shorter model within this of the full one on both figures is preferred
_NEW_TERM_WEIGHTS = (0.25, 0.5, 1.0)  # relative to the first term's weight of 1
_WEIGHT_STEPS = (0.5, 2.0)
_WEIGHT_ROUNDS = 2
_MAD_TO_SD = 1.4826

Stat = Literal["robust", "plain"]
# (held-out priorities in the one ranking, the rows they belong to) -> the selection key, larger is better; the
# default is recall at the budget (4 places) then AUC
Objective = Callable[[np.ndarray, "FitData"], tuple[float, float]]


@dataclass(frozen=True)
class Spec:
    """A linear weighting: (signal, weight) terms, the statistics they are z-scored with and the |z| cap."""

    terms: tuple[tuple[str, float], ...]
    stat: Stat = "robust"
    clip: float | None = CLIP

    def describe(self, z: bool = True) -> str:
        return " + ".join(f"{w:g}*z({n})" if z else f"{w:g}*{n}" for n, w in self.terms)


@dataclass(frozen=True)
class FitData:
    """What a fit sees: signal values (NaN = skipped), labels, groups and the forcing severity of every item."""

    names: list[str]
    x: np.ndarray  # (n_items, n_signals)
    y: np.ndarray  # bool: the positive class (an outlier, a MAJOR error)
    groups: np.ndarray  # group label per item (passage or sutta); folds never split a group
    forced: tuple[Severity | None, ...]  # the hard-flag rule's most severe forcing flag per item (None = not forced)
    tags: np.ndarray | None = None  # an optional label per item that an objective reads (e.g. the error injected)

    def __post_init__(self) -> None:
        n = self.x.shape[0]
        if self.x.ndim != 2 or self.x.shape[1] != len(self.names):
            raise ValueError(f"x is {self.x.shape} for {len(self.names)} signals")
        if not (self.y.shape[0] == self.groups.shape[0] == len(self.forced) == n):
            raise ValueError(
                f"{n} rows but {self.y.shape[0]} labels, {self.groups.shape[0]} groups, {len(self.forced)}"
            )

    def rows(self, idx: np.ndarray) -> FitData:
        tags = None if self.tags is None else self.tags[idx]
        return FitData(self.names, self.x[idx], self.y[idx], self.groups[idx], tuple(self.forced[i] for i in idx), tags)

    def column(self, name: str) -> np.ndarray:
        return self.x[:, self.names.index(name)]


# ----------------------------------------------------------------------------------------------------- folds
def grouped_folds(groups: Sequence[object] | np.ndarray, n_folds: int, seed: int = SEED) -> np.ndarray:
    """Fold index per item: the sorted distinct groups, shuffled with ``seed``, dealt out to the folds in turn."""
    if n_folds < 2:
        raise ValueError(f"need at least 2 folds, got {n_folds}")
    uniq, codes = np.unique(np.asarray(groups), return_inverse=True)
    perm = np.random.default_rng(seed).permutation(uniq.shape[0])
    fold_of_group = np.empty(uniq.shape[0], dtype=np.int64)
    fold_of_group[perm] = np.arange(uniq.shape[0]) % n_folds
    return fold_of_group[codes.ravel()]


def folds_description(n_folds: int, grouped_by: str, seed: int = SEED) -> str:
    return f"{n_folds} folds grouped by {grouped_by}, seed {seed}"


# ----------------------------------------------------------------------------------------------------- terms
def reference_stats(col: np.ndarray, stat: Stat = "robust") -> tuple[float, float]:
    """(centre, scale) of the finite values: median and 1.4826 MAD (robust) or mean and sd (plain)."""
    col = col[np.isfinite(col)]
    if col.shape[0] < 2:  # nothing to scale by: z is the raw offset from the one value (or from 0)
        return (float(col[0]) if col.shape[0] else 0.0), 1.0
    if stat == "plain":
        return float(col.mean()), float(col.std(ddof=1)) or 1.0
    med = float(np.median(col))
    mad = _MAD_TO_SD * float(np.median(np.abs(col - med)))
    if mad <= 1e-12:  # a mostly-constant signal (e.g. one-sided z): fall back to the sd so z stays finite
        mad = float(col.std(ddof=1)) or 1.0
    return med, mad


def term_z(col: np.ndarray, mean: float, sd: float, clip: float | None) -> np.ndarray:
    z = (col - mean) / sd
    if clip is not None:
        z = np.clip(z, -clip, clip)
    return np.nan_to_num(z, nan=0.0)  # a skipped signal counts as its reference mean, as in risk.score


def score_terms(columns: Mapping[str, np.ndarray], terms: Sequence[SignalWeight], n: int) -> np.ndarray:
    """Scores of ``n`` items under fixed terms (a model's), a column absent from ``columns`` counting z = 0."""
    out = np.zeros(n)
    for t in terms:
        col = columns.get(t.name)
        if col is not None:
            out += t.weight * term_z(col, t.mean, t.sd, t.clip)
    return out


def _apply(spec: Spec, data: FitData, train: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Scores of ``rows`` with statistics fitted on ``train`` (boolean masks)."""
    out = np.zeros(int(rows.sum()))
    for name, w in spec.terms:
        col = data.column(name)
        mean, sd = reference_stats(col[train], spec.stat)
        out += w * term_z(col[rows], mean, sd, spec.clip)
    return out


def held_out_scores(spec: Spec, data: FitData, folds: np.ndarray) -> np.ndarray:
    """Every item scored with statistics from the other folds only."""
    out = np.zeros(data.y.shape[0])
    for k in np.unique(folds):
        test = folds == k
        out[test] = _apply(spec, data, ~test, test)
    return out


def fitted_scores(spec: Spec, data: FitData) -> np.ndarray:
    """In-sample scores: statistics fitted on every item (what the written model computes)."""
    everything = np.ones(data.y.shape[0], dtype=bool)
    return _apply(spec, data, everything, everything)


# ----------------------------------------------------------------------------------------------------- search
def _normalised(terms: Sequence[tuple[str, float]]) -> tuple[tuple[str, float], ...]:
    total = sum(w for _, w in terms)
    return tuple((n, round(w / total, 4)) for n, w in terms)


@dataclass(frozen=True)
class Selection:
    """The forward-selected, weight-searched spec and the one chosen (its simplest good leading part, or itself)."""

    full: Spec
    chosen: Spec


class Search:
    """The selection procedure on one data set and fold layout (see the module docstring)."""

    def __init__(
        self,
        data: FitData,
        folds: np.ndarray,
        budget: float = DEFAULT_BUDGET,
        *,
        objective: Objective | None = None,
        max_terms: int = MAX_TERMS,
    ) -> None:
        self.data = data
        self.folds = folds
        self.budget = budget
        self.objective = objective
        self.max_terms = max_terms

    def evaluate(self, spec: Spec) -> tuple[float, float]:
        """The selection key of a spec: held-out recall at the budget (4 places), then held-out AUC (or the
        ``objective`` given, on the same held-out priorities)."""
        s = priorities(held_out_scores(spec, self.data, self.folds), self.data.forced)
        if self.objective is not None:
            return self.objective(s, self.data)
        return (round(recall_at_budget(s, self.data.y, self.budget), 4), auc(s, self.data.y))

    def greedy(self, pool: Sequence[str], start: Sequence[tuple[str, float]] = ()) -> Spec:
        """Forward selection from ``start`` (e.g. the active model's terms, kept unless a later step beats them)."""
        terms: list[tuple[str, float]] = list(start)
        best_key = self.evaluate(Spec(_normalised(terms))) if terms else (-1.0, -1.0)
        while len(terms) < self.max_terms:
            chosen = {n for n, _ in terms}
            trial = [
                (self.evaluate(Spec((*terms, (name, w)))), name, w)
                for name in pool
                if name not in chosen
                for w in ((1.0,) if not terms else _NEW_TERM_WEIGHTS)
            ]
            if not trial:
                break
            key, name, w = max(trial, key=lambda t: t[0])
            if key[0] < best_key[0] + MIN_GAIN and key[1] < best_key[1] + MIN_GAIN:
                break
            best_key = key
            terms.append((name, w))
        if not terms:
            raise ValueError("no signal to select from")
        return Spec(_normalised(terms))

    def weight_search(self, spec: Spec) -> Spec:
        best, best_key = spec, self.evaluate(spec)
        for _ in range(_WEIGHT_ROUNDS):
            improved = False
            for j in range(len(best.terms)):
                for mult in _WEIGHT_STEPS:
                    terms = [(n, w * (mult if k == j else 1.0)) for k, (n, w) in enumerate(best.terms)]
                    cand = Spec(_normalised(terms), spec.stat, spec.clip)
                    key = self.evaluate(cand)
                    if key > best_key and (key[0] >= best_key[0] + MIN_GAIN or key[1] >= best_key[1] + MIN_GAIN):
                        best, best_key, improved = cand, key, True
            if not improved:
                break
        return best

    def prefer_simpler(self, spec: Spec) -> Spec:
        full = self.evaluate(spec)
        for k in range(1, len(spec.terms)):
            cand = self.weight_search(Spec(_normalised(spec.terms[:k]), spec.stat, spec.clip))
            key = self.evaluate(cand)
            if key[0] >= full[0] - SIMPLER_MARGIN and key[1] >= full[1] - SIMPLER_MARGIN:
                return cand
        return spec

    def select(self, pool: Sequence[str], *, simplify: bool, start: Sequence[tuple[str, float]] = ()) -> Selection:
        full = self.weight_search(self.greedy(pool, start))
        return Selection(full, self.prefer_simpler(full) if simplify else full)


def selection_description(budget: float, *, simplify: bool) -> str:
    text = (
        "forward selection of robust-z terms (new term at 1/4, 1/2 or 1x), then 0.5x/2x weight search, on held-out "
        f"recall@{budget:.0%} then AUC; stop below a {MIN_GAIN:g} gain"
    )
    if simplify:
        text += (
            "; then the shortest leading part of the greedy terms (renormalised, weight-searched) within "
            f"{SIMPLER_MARGIN:g} of the full spec on both figures (in the nested CV too)"
        )
    return text


@dataclass(frozen=True)
class Nested:
    """Outer held-out scores of the whole procedure and the spec each outer fold chose."""

    scores: np.ndarray
    specs: list[Spec]


def nested_refusal(data: FitData, folds: np.ndarray, n_folds: int) -> str | None:
    """Why a nested CV cannot run on this layout (an outer training part too small to fold again, or one class
    missing from it), None when it can."""
    for k in np.unique(folds):
        train = folds != k
        n_groups = np.unique(data.groups[train]).shape[0]
        pos = int(data.y[train].sum())
        if n_groups < n_folds:
            return f"outer fold {k} leaves {n_groups} groups to train on; the inner CV needs {n_folds}"
        if pos == 0 or pos == int(train.sum()):
            return f"outer fold {k} leaves a training part with only one class"
    return None


def nested_cv(
    data: FitData,
    folds: np.ndarray,
    pool: Sequence[str],
    *,
    n_folds: int,
    budget: float = DEFAULT_BUDGET,
    simplify: bool,
    seed: int = SEED,
    objective: Objective | None = None,
    max_terms: int = MAX_TERMS,
) -> Nested:
    """Selection and weights re-run inside each outer fold; each outer fold scored with its own spec."""
    out = np.zeros(data.y.shape[0])
    specs = []
    for k in np.unique(folds):
        test = folds == k
        sub = data.rows(np.flatnonzero(~test))
        inner = grouped_folds(sub.groups, n_folds, seed + 1 + int(k))
        spec = (
            Search(sub, inner, budget, objective=objective, max_terms=max_terms).select(pool, simplify=simplify).chosen
        )
        specs.append(spec)
        out[test] = _apply(spec, data, ~test, test)
    return Nested(out, specs)


# ----------------------------------------------------------------------------------------------------- results
def _r4(x: float) -> float | None:
    return round(float(x), 4) if np.isfinite(x) else None


def figures(
    scores: np.ndarray,
    data: FitData,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    extra: Mapping[str, float] | None = None,
) -> dict[str, object]:
    """AUC and recall/precision with 95% Wilson intervals at each budget of ``scores`` in the one ranking (4 places,
    None where undefined); ``extra`` figures follow the AUC."""
    s = priorities(scores, data.forced)
    out: dict[str, object] = {"auc": _r4(auc(s, data.y))}
    out.update({k: _r4(v) for k, v in (extra or {}).items()})
    for st in budget_stats(s, data.y, budgets):
        key = f"{st.budget:.0%}"
        out[f"recall@{key}"] = _r4(st.recall)
        out[f"recall@{key}_wilson95"] = [_r4(v) for v in st.recall_ci]
        out[f"precision@{key}"] = _r4(st.precision)
        out[f"precision@{key}_wilson95"] = [_r4(v) for v in st.precision_ci]
    return out


def build_model(
    spec: Spec,
    data: FitData,
    *,
    name: str,
    version: str,
    description: str,
    fallback: str | None,
    hard_flags: HardFlagRule,
    reference_data: str,
    reference_label: str,
    fit: dict[str, object],
    embedding_model: str | None = None,
) -> RiskModel:
    """The risk model of a spec: statistics on every item, and its in-sample scores as the reference distribution."""
    terms = []
    for n, w in spec.terms:
        mean, sd = reference_stats(data.column(n), spec.stat)
        # a scale below the 6 stored places is kept unrounded (a model needs sd > 0)
        terms.append(
            SignalWeight(name=n, weight=round(w, 4), mean=round(mean, 6), sd=round(sd, 6) or sd, clip=spec.clip)
        )
    scores = fitted_scores(spec, data)
    quantiles = [round(float(q), 6) for q in np.quantile(scores, np.linspace(0.0, 1.0, 1001))]
    return RiskModel(
        name=name,
        version=version,
        description=description,
        requires_peers=any(n in PEER_SIGNALS for n, _ in spec.terms),
        signals=terms,
        hard_flags=hard_flags,
        fallback=fallback,
        reference_data=reference_data,
        reference=ReferenceDistribution(data=reference_label, n=int(scores.shape[0]), quantiles=quantiles),
        embedding_model=embedding_model,
        fit=fit,
    )
