"""Fits of new risk models on labelled items: z-scored linear weightings searched with CV grouped by passage."""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np
from sklearn.model_selection import GroupKFold

from service.core.calibration.labels import LabelledItem
from service.core.calibration.report import num
from service.core.errors import InputError
from service.core.metrics import DEFAULT_BUDGETS, auc, budget_stats
from service.core.ranking import forcing_flag, priorities
from service.core.risk import HardFlagRule, ReferenceDistribution, RiskModel, SignalWeight
from service.core.signals import PEER_SIGNALS
from service.core.types import SignalValue

__all__ = ["CLIP", "fit_risk_model", "grouped_folds"]

CLIP = 5.0


def grouped_folds(groups: Sequence[str], n_splits: int) -> np.ndarray:
    """Fold index per item with sklearn's GroupKFold: every translation of a passage lands in the same fold."""
    codes = np.unique(np.asarray(groups), return_inverse=True)[1]
    folds = np.full(codes.shape[0], -1, dtype=np.int64)
    for k, (_, test) in enumerate(GroupKFold(n_splits=n_splits).split(np.zeros(codes.shape[0]), groups=codes)):
        folds[test] = k
    return folds


def _z(col: np.ndarray, train: np.ndarray) -> tuple[float, float]:
    vals = col[train & np.isfinite(col)]
    if vals.shape[0] < 2:
        return 0.0, 1.0
    mean, sd = float(vals.mean()), float(vals.std(ddof=1))
    return mean, sd if sd > 1e-12 else 1.0


def _zcol(col: np.ndarray, mean: float, sd: float) -> np.ndarray:
    z = np.clip((col - mean) / sd, -CLIP, CLIP)
    return np.nan_to_num(z, nan=0.0)  # a missing signal counts as its reference mean, as in risk.score


def fit_risk_model(
    items: Sequence[LabelledItem],
    *,
    tenant: str,
    source: str,
    name: str,
    budget: float = 0.20,
    n_folds: int = 5,
    signals: Sequence[str] | None = None,
    min_items: int = 40,
    min_majors: int = 8,
    fallback: str | None = None,
) -> tuple[RiskModel, dict[str, Any]]:
    """Search z-scored linear weightings of the signals with grouped CV; select by held-out MAJOR recall at
    ``budget`` (then AUC, then fewer terms). Raises InputError with the numbers needed when labels are too few."""
    if not 0.0 < budget <= 1.0:
        raise InputError(f"budget must be in (0, 1], got {budget}")
    if n_folds < 2:
        raise InputError(f"folds must be at least 2, got {n_folds}")
    y = np.asarray([it.label == "MAJOR" for it in items])
    passages = [it.passage for it in items]
    n_groups = len(set(passages))
    n_major, n_other = int(y.sum()), int((~y).sum())
    need = {"items": min_items, "majors": min_majors, "non_majors": min_majors, "passages": n_folds}
    have = {"items": len(items), "majors": n_major, "non_majors": n_other, "passages": n_groups}
    short = [k for k in need if have[k] < need[k]]
    if short:
        parts = ", ".join(f"{have[k]} {k.replace('_', '-')} (need {need[k]})" for k in short)
        raise InputError(f"too few {source} labels to fit a risk model: {parts}", extra={"needed": need, "have": have})
    available = sorted({n for it in items for n, s in it.signals.items() if isinstance(s, SignalValue)})
    if signals is not None:
        unknown = sorted(set(signals) - set(available))
        if unknown:
            raise InputError(
                f"signals {unknown} have no values among the labelled items", extra={"available": available}
            )
        available = sorted(set(signals))
    x = np.asarray([[it.value(n) for n in available] for it in items], dtype=np.float64).reshape(len(items), -1)
    coverage = np.isfinite(x).mean(axis=0) if x.size else np.zeros(0)
    keep = [j for j, n in enumerate(available) if coverage[j] >= 0.5 and np.nanstd(x[:, j]) > 1e-12]
    dropped = sorted(set(available) - {available[j] for j in keep})
    if not keep:
        raise InputError("no signal has values on at least half of the labelled items", extra={"dropped": dropped})
    names = [available[j] for j in keep]
    x = x[:, keep]
    # the fitted model forces what the default hard-flag rule forces; the fit ranks exactly as that model will
    hard_flags = HardFlagRule(force_to_top=True, severities=["critical", "major"])
    severities = [(f.severity if (f := forcing_flag(hard_flags, it.flags)) else None) for it in items]
    folds = grouped_folds(passages, n_folds)
    # held-out z columns: each fold z-scored with the other folds' statistics
    zcv = np.zeros_like(x)
    for k in np.unique(folds):
        test = folds == k
        for j in range(x.shape[1]):
            mean, sd = _z(x[:, j], ~test)
            zcv[test, j] = _zcol(x[test, j], mean, sd)

    def ranked(terms: tuple[tuple[int, float], ...]) -> np.ndarray:
        return priorities(sum((w * zcv[:, j] for j, w in terms), np.zeros(len(items))), severities)

    def evaluate(terms: tuple[tuple[int, float], ...]) -> tuple[float, float]:
        s = ranked(terms)
        st = budget_stats(s, y, (budget,))[0]
        return (round(st.recall, 6), round(auc(s, y), 6))

    specs: list[tuple[tuple[int, float], ...]] = [((j, 1.0),) for j in range(len(names))]
    singles = sorted(range(len(names)), key=lambda j: evaluate(((j, 1.0),)), reverse=True)[:6]
    for a, b in itertools.combinations(singles, 2):
        specs += [((a, wa), (b, round(1.0 - wa, 2))) for wa in (0.3, 0.5, 0.7)]
    for trio in itertools.combinations(singles, 3):
        specs.append(tuple((j, round(1 / 3, 4)) for j in trio))
        for lead in trio:
            specs.append(tuple((j, 0.5 if j == lead else 0.25) for j in trio))
    scored = [(evaluate(sp), -len(sp), sp) for sp in specs]
    best_key, _, best = max(scored, key=lambda t: (t[0], t[1]))
    cv_scores = ranked(best)
    everything = np.ones(len(items), dtype=bool)
    terms = []
    full = np.zeros(len(items))
    for j, w in best:
        mean, sd = _z(x[:, j], everything)
        terms.append(SignalWeight(name=names[j], weight=round(w, 4), mean=round(mean, 6), sd=round(sd, 6), clip=CLIP))
        full += w * _zcol(x[:, j], mean, sd)
    cv_figures: dict[str, Any] = {"auc_major_vs_nonmajor": num(auc(cv_scores, y))}
    for st in budget_stats(cv_scores, y, tuple(sorted({*DEFAULT_BUDGETS, budget}))):
        key = f"{st.budget:.0%}"
        cv_figures[f"recall@{key}"] = num(st.recall)
        cv_figures[f"recall@{key}_wilson95"] = [num(v) for v in st.recall_ci]
        cv_figures[f"precision@{key}"] = num(st.precision)
        cv_figures[f"precision@{key}_wilson95"] = [num(v) for v in st.precision_ci]
    fit = {
        "tenant": tenant,
        "label": f"MAJOR vs VALID+MINOR ({source} labels; human: majority of an item's verdicts)",
        "source": source,
        "n_items": len(items),
        "n_major": n_major,
        "n_passages": n_groups,
        "folds": f"{n_folds}-fold sklearn GroupKFold grouped by source passage",
        "selection": f"held-out MAJOR recall at {budget:.0%}, then AUC, then fewer terms; {len(specs)} weightings of "
        f"z-scored signals (clip {CLIP:g}) tried; the CV figures are those of the selected weighting (optimistic "
        "by the selection itself)",
        "budget": budget,
        "signals_considered": names,
        "signals_dropped": dropped,
        "cv": cv_figures,
        "selection_key": {"recall": best_key[0], "auc": best_key[1]},
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
    }
    quantiles = [round(float(q), 6) for q in np.quantile(full + 0.0, np.linspace(0.0, 1.0, 1001))]
    model = RiskModel(
        name=name,
        version="1.0.0",
        description=f"Calibrated on {len(items)} {source}-labelled items of tenant {tenant} "
        f"({' + '.join(f'{t.weight:g}*z({t.name})' for t in terms)}).",
        requires_peers=any(t.name in PEER_SIGNALS for t in terms),
        signals=terms,
        hard_flags=hard_flags,
        fallback=fallback if any(t.name in PEER_SIGNALS for t in terms) else None,
        reference_data=f"{len(items)} {source}-labelled items of tenant {tenant}",
        reference=ReferenceDistribution(data="labelled items, in-sample scores", n=len(items), quantiles=quantiles),
        fit=fit,
    )
    return model, fit
