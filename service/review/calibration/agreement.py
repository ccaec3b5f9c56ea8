"""Agreement between reviewers on item labels: Cohen's kappa per pair of reviewers, Krippendorff's alpha overall.

Each reviewer counts with her verdict in force on an item (``durable.in_force``: a verdict that replaces her earlier
one counts, the replaced one does not; of two without a replacement, the later). Kappa of a pair is over the items
both judged; alpha (nominal, VALID/MINOR/MAJOR) over every item two or more reviewers judged, a reviewer who did not
judge an item counting as missing. Intervals are seeded percentile bootstraps over those items
(``service.core.metrics.bootstrap_interval``; its undefined resamples are counted). The statistics are
``service.core.metrics``'s (scikit-learn's kappa, Krippendorff's coincidences).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from service.core.metrics import (
    BootstrapOptions,
    Interval,
    bootstrap_interval,
    cohen_kappa,
    cohen_kappa_rows,
    krippendorff_alpha_nominal,
    krippendorff_alpha_nominal_rows,
)
from service.state.durable import LABELS, Label, Verdict, in_force

__all__ = ["AGREEMENT_BOOTSTRAP", "reviewer_agreement"]

# fixed, so the page and the API give the same interval for the same verdicts
AGREEMENT_BOOTSTRAP = BootstrapOptions(resamples=2000, confidence=0.95, seed=0)


def _num(x: float) -> float | None:
    return round(float(x), 6) if math.isfinite(x) else None


def _interval(ci: Interval | None) -> dict[str, Any] | None:
    if ci is None:
        return None
    return {"low": _num(ci.low), "high": _num(ci.high), "confidence": ci.confidence, "undefined": ci.undefined}


def reviewer_agreement(verdicts: Sequence[Verdict], options: BootstrapOptions = AGREEMENT_BOOTSTRAP) -> dict[str, Any]:
    """Kappa per reviewer pair and alpha overall, each with its item count and bootstrap interval (JSON-ready)."""
    by_item: dict[str, dict[str, Label]] = {}
    for v in sorted(in_force(verdicts), key=lambda v: v.id):  # a later verdict of a reviewer overwrites hers
        by_item.setdefault(v.item_id, {})[v.reviewer] = v.label
    reviewers = sorted({r for labels in by_item.values() for r in labels})
    code = {lab: i for i, lab in enumerate(LABELS)}
    pairs = []
    for a, b in itertools.combinations(reviewers, 2):
        common = [labels for labels in by_item.values() if a in labels and b in labels]
        row: dict[str, Any] = {"a": a, "b": b, "n": len(common)}
        if not common:
            row |= {"kappa": None, "ci": None, "refused": "no item judged by both"}
            pairs.append(row)
            continue
        la, lb = [c[a] for c in common], [c[b] for c in common]
        ca = np.asarray([code[x] for x in la])
        cb = np.asarray([code[x] for x in lb])
        row["exact_agreement"] = _num(float((ca == cb).mean()))
        row["kappa"] = _num(cohen_kappa(la, lb))
        ci = bootstrap_interval(
            len(common), lambda d, ca=ca, cb=cb: cohen_kappa_rows(ca[d], cb[d], len(LABELS)), options, vectorized=True
        )
        row["ci"] = _interval(ci)
        if len(common) < 2:
            row["refused_ci"] = "an interval needs at least 2 common items"
        pairs.append(row)
    units = [[labels.get(r) for r in reviewers] for labels in by_item.values() if len(labels) >= 2]
    alpha: dict[str, Any] = {"level": "nominal", "reviewers": len(reviewers), "n_items": len(units)}
    value = krippendorff_alpha_nominal(units) if units else math.nan
    alpha["value"] = _num(value)
    if alpha["value"] is None:
        alpha["ci"] = None
        alpha["refused"] = (
            "alpha needs items judged by at least two reviewers with more than one label among them; "
            f"{len(units)} items have two or more reviewers"
        )
    else:
        alpha["ci"] = _interval(
            bootstrap_interval(
                len(units), lambda d: krippendorff_alpha_nominal_rows(units, d), options, vectorized=True
            )
        )
    return {
        "unit": "item label (VALID/MINOR/MAJOR), each reviewer's latest verdict",
        "reviewers": reviewers,
        "items_with_several_reviewers": len(units),
        "pairs": pairs,
        "alpha": alpha,
        "bootstrap": {"resamples": options.resamples, "confidence": options.confidence, "seed": options.seed},
    }
