"""Fits of new risk models on labelled items (reviewer verdicts or panel labels), by the one method of ``search``.

MAJOR is the positive class (VALID and MINOR the negative); folds are grouped by source passage; the fitted model
forces what the default hard-flag rule forces, and the fit ranks exactly as that model will.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from service.core.budget import DEFAULT_BUDGET
from service.core.metrics import DEFAULT_BUDGETS
from service.core.ranking import forcing_flag
from service.core.risk import HardFlagRule, RiskModel, RiskRegistry
from service.core.signals import PEER_SIGNALS
from service.core.types import SignalValue
from service.platform.errors import InputError
from service.review.calibration.checks import without_forcing
from service.review.calibration.compare import compare_models, hold_apart, sutta_of
from service.review.calibration.labels import LabelledItem
from service.review.calibration.search import (
    SEED,
    FitData,
    Search,
    build_model,
    figures,
    fitted_scores,
    folds_description,
    grouped_folds,
    held_out_scores,
    nested_cv,
    nested_refusal,
    selection_description,
)

__all__ = ["MIN_COVERAGE", "fit_risk_model", "validated_fit"]

MIN_COVERAGE = 0.5  # a signal enters the pool when at least this share of the labelled items has a value for it


def fit_risk_model(
    items: Sequence[LabelledItem],
    *,
    tenant: str,
    source: str,
    name: str,
    budget: float = DEFAULT_BUDGET,
    n_folds: int = 5,
    signals: Sequence[str] | None = None,
    min_items: int = 40,
    min_majors: int = 8,
    fallback: str | None = None,
    start: RiskModel | None = None,
    demote: Sequence[str] = (),
) -> tuple[RiskModel, dict[str, Any]]:
    """Select z-scored linear terms by held-out MAJOR recall at ``budget`` (then AUC) with folds grouped by passage,
    estimate the whole selection by nested CV, and build the model. With ``start`` (the active model) the selection
    starts from its terms and keeps its forcing choices, less the ``demote``d checks (what reviewers' judgements of
    findings proposed). Raises InputError with the numbers needed when labels are too few."""
    if not 0.0 < budget <= 1.0:
        raise InputError(f"budget must be in (0, 1], got {budget}")
    if n_folds < 2:
        raise InputError(f"folds must be at least 2, got {n_folds}")
    y = np.asarray([it.label == "MAJOR" for it in items], dtype=bool)
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
    keep = [j for j, n in enumerate(available) if coverage[j] >= MIN_COVERAGE and np.nanstd(x[:, j]) > 1e-12]
    dropped = sorted(set(available) - {available[j] for j in keep})
    if not keep:
        raise InputError(
            f"no signal has varying values on at least {MIN_COVERAGE:.0%} of the labelled items",
            extra={"dropped": dropped},
        )
    names = [available[j] for j in keep]
    hard_flags = without_forcing(start.hard_flags if start is not None else HardFlagRule(), demote)
    # the active model's terms the data can carry (a negative weight cannot be renormalised as a share)
    start_terms = (
        [] if start is None else [(t.name, t.weight) for t in start.signals if t.name in names and t.weight > 0]
    )
    forced = tuple((f.severity if (f := forcing_flag(hard_flags, it.flags)) else None) for it in items)
    data = FitData(names, x[:, keep], y, np.asarray(passages), forced)
    folds = grouped_folds(data.groups, n_folds, SEED)

    search = Search(data, folds, budget)
    selection = search.select(names, simplify=True, start=start_terms)
    spec = selection.chosen
    budgets = tuple(sorted({*DEFAULT_BUDGETS, budget}))
    fit: dict[str, Any] = {
        "tenant": tenant,
        "label": f"MAJOR vs VALID+MINOR ({source} labels; human: majority of an item's verdicts)",
        "source": source,
        "n_items": len(items),
        "n_major": n_major,
        "n_passages": n_groups,
        "folds": folds_description(n_folds, "source passage", SEED),
        "selection": selection_description(budget, simplify=True),
        "budget": budget,
        "signals_considered": names,
        "signals_dropped": dropped,
        "started_from": None if start is None else {"model": start.rule, "terms": [n for n, _ in start_terms]},
        "forcing": msgspec.to_builtins(hard_flags),
        "demoted": list(demote),
        "cv": figures(held_out_scores(spec, data, folds), data, budgets),
        "in_sample": figures(fitted_scores(spec, data), data, budgets),
    }
    refusal = nested_refusal(data, folds, n_folds)
    if refusal is None:
        nested = nested_cv(data, folds, names, n_folds=n_folds, budget=budget, simplify=True, seed=SEED)
        fit["nested_cv"] = figures(nested.scores, data, budgets)
        fit["nested_cv_terms"] = [s.describe() for s in nested.specs]
    else:
        fit["nested_cv"] = None
        fit["nested_cv_refused"] = refusal
    key = search.evaluate(spec)
    fit["selection_key"] = {"recall": key[0], "auc": round(key[1], 6)}
    fit["date"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    uses_peers = any(n in PEER_SIGNALS for n, _ in spec.terms)
    model = build_model(
        spec,
        data,
        name=name,
        version="1.0.0",
        description=f"Calibrated on {len(items)} {source}-labelled items of tenant {tenant} ({spec.describe()}).",
        fallback=fallback if uses_peers else None,
        hard_flags=hard_flags,
        reference_data=f"{len(items)} {source}-labelled items of tenant {tenant}",
        reference_label="labelled items, in-sample scores",
        fit=fit,
    )
    return model, fit


def validated_fit(
    items: Sequence[LabelledItem],
    *,
    active: RiskModel,
    registry: RiskRegistry | None,
    demote: Sequence[str] = (),
    **kwargs: Any,
) -> tuple[RiskModel, dict[str, Any]]:
    """A fit that starts from ``active`` on the items outside the held-apart suttas, compared with ``active`` on the
    held-apart ones (``fit["validation"]``; activation refuses a model that loses there)."""
    held = hold_apart(items)
    train = [it for it in items if sutta_of(it.passage) not in held]
    test = [it for it in items if sutta_of(it.passage) in held]
    model, fit = fit_risk_model(train, start=active, demote=demote, **kwargs)
    validation = compare_models(test, model, active, registry, basis=f"{len(held)} suttas held apart from the fit")
    fit["validation"] = {"held_apart_suttas": sorted(held), **validation}
    return msgspec.structs.replace(model, fit=fit), fit
