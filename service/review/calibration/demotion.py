"""A demotion: the active model with one check no longer forcing, its signal a score term instead.

The term is the check's own signal (``critical.check.CHECKS``: the first signal raising the check's rule that the
tenant's labelled items have values for), z-scored robustly on those items, at the smallest weight the model gives a
term, and optional (a request without the critical checks scores without it). Without values the check only stops
forcing, and the model says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec
import numpy as np

from service.core.critical.check import CHECKS
from service.core.risk import RiskModel, SignalWeight
from service.platform.errors import InputError
from service.review.calibration.checks import without_forcing
from service.review.calibration.labels import LabelledItem
from service.review.calibration.search import CLIP, reference_stats

__all__ = ["demoted_model"]


def demoted_model(
    active: RiskModel, check: str, items: Sequence[LabelledItem], *, name: str, proposal: dict[str, Any] | None
) -> RiskModel:
    """``active`` with ``check`` demoted (see the module docstring); InputError when ``active`` does not force it."""
    if not any(active.hard_flags.forces(check, sev) for sev in active.hard_flags.severities):
        raise InputError(f"the active model {active.rule} does not force {check!r}: nothing to demote")
    have = {t.name for t in active.signals}
    term: SignalWeight | None = None
    for spec in CHECKS:
        if spec.rule != check or spec.name in have:
            continue
        col = np.asarray([it.value(spec.name) for it in items], dtype=np.float64)
        if int(np.isfinite(col).sum()) < 2:
            continue
        centre, scale = reference_stats(col)
        weight = min((t.weight for t in active.signals if t.weight > 0), default=1.0)
        term = SignalWeight(spec.name, weight, round(centre, 6), round(scale, 6) or scale, CLIP, optional=True)
        break
    fit: dict[str, Any] = {
        "kind": "demotion",
        "demoted": check,
        "from": active.rule,
        "proposal": proposal,
        "term": None if term is None else msgspec.to_builtins(term),
        "note": None
        if term is not None
        else f"no signal of {check!r} has values on the labelled items: it only stops forcing",
    }
    description = f"{active.rule} with {check} demoted from forcing to a score term"
    return msgspec.structs.replace(
        active,
        name=name,
        version="1.0.0",
        description=description if term is not None else f"{active.rule} with {check} no longer forcing",
        signals=[*active.signals, *([term] if term is not None else [])],
        hard_flags=without_forcing(active.hard_flags, [check]),
        fit=fit,
    )
