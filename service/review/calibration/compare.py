"""A model against the active one on the same labelled items: recall of MAJOR at each budget, overall and per error
category, with Wilson intervals; and whether the new model loses.

Both models re-score the items' stored signals and flags (``risk.score``; each ranks in the one ranking with its own
forcing choices), and each budget reviews the top share of these items. Per error category the positives are the
MAJOR items reviewers put in that category (the ranking stays over every item). A model **loses** when at some budget,
overall or in a category with at least ``min_positives`` MAJOR items, its recall falls below the lower end of the
active model's 95% Wilson interval: a drop larger than the active model's own figure can explain by chance.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from service.core.metrics import DEFAULT_BUDGETS, budget_stats
from service.core.risk import RiskModel, RiskRegistry, score
from service.review.calibration.labels import LabelledItem

__all__ = [
    "HOLD_APART_SHARE",
    "MIN_CATEGORY_POSITIVES",
    "activation_comparison",
    "compare_models",
    "hold_apart",
    "sutta_of",
]

MIN_CATEGORY_POSITIVES = 5  # a category with fewer MAJOR items is shown, but cannot make a model lose
HOLD_APART_SHARE = 0.3


def sutta_of(passage: str) -> str:
    """The sutta a passage belongs to (``mn82:24`` -> ``mn82``): held-apart sets never split a sutta."""
    return passage.split(":", 1)[0]


def hold_apart(items: Sequence[LabelledItem], share: float = HOLD_APART_SHARE) -> frozenset[str]:
    """The suttas held apart for validation: those whose name hashes (crc32, stable across processes and runs) into
    the lowest ``share`` of the range, so adding verdicts never moves a sutta between the parts."""
    suttas = sorted({sutta_of(it.passage) for it in items}, key=lambda s: (zlib.crc32(s.encode()), s))
    held = [s for s in suttas if zlib.crc32(s.encode()) / 2**32 < share]
    if len(suttas) >= 2:  # at least one sutta on each side
        held = held[: len(suttas) - 1] or suttas[:1]
    return frozenset(held)


def activation_comparison(
    items: Sequence[LabelledItem], model: RiskModel, active: RiskModel, registry: RiskRegistry | None
) -> dict[str, Any]:
    """The comparison activation shows: a fit's held-apart suttas (its ``fit.validation``), else every labelled item
    (a model not fitted on them: shipped, or a demotion)."""
    validation = model.fit.get("validation") if isinstance(model.fit, dict) else None
    held = validation.get("held_apart_suttas") if isinstance(validation, dict) else None
    if isinstance(held, list):
        suttas = set(held)
        rows = [it for it in items if sutta_of(it.passage) in suttas]
        return compare_models(rows, model, active, registry, basis=f"{len(suttas)} suttas held apart from the fit")
    return compare_models(items, model, active, registry, basis="every labelled item")


def _priorities(model: RiskModel, items: Sequence[LabelledItem], registry: RiskRegistry | None) -> np.ndarray:
    return np.asarray([score(model, it.signals, it.flags, registry=registry).priority for it in items])


def _r(x: float) -> float | None:
    return round(float(x), 6) if math.isfinite(x) else None


def _recalls(p: np.ndarray, y: np.ndarray, budgets: Sequence[float]) -> list[dict[str, Any]]:
    return [
        {
            "budget": st.budget,
            "hits": st.hits,
            "positives": st.positives,
            "recall": _r(st.recall),
            "ci": [_r(st.recall_ci[0]), _r(st.recall_ci[1])],
        }
        for st in budget_stats(p, y, budgets)
    ]


def compare_models(
    items: Sequence[LabelledItem],
    candidate: RiskModel,
    active: RiskModel,
    registry: RiskRegistry | None = None,
    *,
    budgets: Sequence[float] = DEFAULT_BUDGETS,
    min_positives: int = MIN_CATEGORY_POSITIVES,
    basis: str = "",
) -> dict[str, Any]:
    """Rows (overall, then each category) of both models' recall at each budget, the losses and the verdict."""
    out: dict[str, Any] = {
        "candidate": candidate.rule,
        "active": active.rule,
        "basis": basis,
        "n_items": len(items),
        "n_major": sum(it.label == "MAJOR" for it in items),
        "rule": "loses: recall below the lower end of the active model's 95% Wilson interval at some budget, overall "
        f"or in a category with at least {min_positives} MAJOR items",
    }
    if not items or not out["n_major"]:
        out |= {"rows": [], "losses": [], "loses": False, "refused": "no MAJOR item to compare recall on"}
        return out
    pc, pa = _priorities(candidate, items, registry), _priorities(active, items, registry)
    major = np.asarray([it.label == "MAJOR" for it in items])
    cats = np.asarray([it.error_category or "uncategorised" for it in items])
    groups = [("all", major)] + [(c, major & (cats == c)) for c in sorted(set(cats[major].tolist()))]
    rows, losses = [], []
    for name, y in groups:
        new, old = _recalls(pc, y, budgets), _recalls(pa, y, budgets)
        counts = name == "all" or int(y.sum()) >= min_positives
        rows.append({"category": name, "positives": int(y.sum()), "counts": counts, "candidate": new, "active": old})
        for a, b in zip(new, old, strict=True):
            low = b["ci"][0]
            if counts and a["recall"] is not None and low is not None and a["recall"] < low:
                losses.append(
                    {
                        "category": name,
                        "budget": a["budget"],
                        "candidate": a["recall"],
                        "active": b["recall"],
                        "active_ci": b["ci"],
                    }
                )
    out |= {"rows": rows, "losses": losses, "loses": bool(losses)}
    return out
