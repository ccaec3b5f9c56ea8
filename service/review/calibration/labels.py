"""Labelled items for calibration: human verdicts (majority per item) or panel labels (latest conclusive one).

An item's human label is the most common label among its verdicts (ties go to the more severe label); a panel label
is the label of the item's latest conclusive adjudication. Human and panel labels are never mixed. Snapshots are
read leniently (plain JSON as the verdict stored it), so verdicts of every earlier version stay usable.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from service.core.ranking import FORCING_LEVEL, priority
from service.core.types import Flag, Severity, SignalResult, SignalValue
from service.state.durable import DurableStore, Label, in_force

__all__ = ["SEVERITY", "LabelledItem", "human_items", "panel_items"]

# label severity: ties between labels of an item go to the more severe one
SEVERITY = {"VALID": 0, "MINOR": 1, "MAJOR": 2}


@dataclass
class LabelledItem:
    item_id: str
    passage: str
    label: Label
    n_labels: int
    snapshot: dict[str, Any]
    candidate_model: str | None = None
    # the error category reviewers gave the item (the most common among the verdicts of its label; None if none)
    error_category: str | None = None
    signals: dict[str, SignalResult] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)

    def __post_init__(self) -> None:
        raw = self.snapshot.get("signals") or {}
        self.signals = {}
        for name, sig in raw.items():
            try:
                self.signals[name] = msgspec.convert(sig, SignalResult)
            except msgspec.ValidationError:
                continue
        self.flags = []
        for f in self.snapshot.get("flags") or []:
            try:
                self.flags.append(msgspec.convert(f, Flag))
            except msgspec.ValidationError:
                continue

    @property
    def forced(self) -> bool:
        return bool((self.snapshot.get("budget") or {}).get("forced"))

    def value(self, name: str) -> float:
        s = self.signals.get(name)
        return float(s.value) if isinstance(s, SignalValue) and math.isfinite(s.value) else math.nan

    @property
    def stored_priority(self) -> float:
        """The item's place in the one ranking when it was assessed (NaN when the snapshot has no risk)."""
        risk = self.snapshot.get("risk") or {}
        v = risk.get("score") if isinstance(risk, dict) else None
        if not isinstance(v, int | float) or not math.isfinite(v):
            return math.nan
        stored = risk.get("forced_severity")
        # snapshots always carried forced_severity with forced_by_flag; "major" covers a hand-made one
        severity: Severity | None = stored if stored in FORCING_LEVEL else ("major" if self.forced else None)
        return priority(float(v), severity)


def _majority(labels: Sequence[Label]) -> Label:
    counts = Counter(labels)
    return max(counts, key=lambda lab: (counts[lab], SEVERITY[lab]))


def human_items(db: DurableStore, tenant: str, candidate_model: str | None = None) -> tuple[list[LabelledItem], int]:
    """Items with human verdicts (majority label per item) and the number of verdicts they rest on; a verdict its
    reviewer replaced does not count."""
    by_item: dict[str, list[Any]] = {}
    for v in in_force(db.verdicts(tenant)):
        by_item.setdefault(v.item_id, []).append(v)
    items = []
    n_verdicts = 0
    for iid, vs in by_item.items():
        snap = vs[0].snapshot
        if candidate_model is not None and snap.get("model") != candidate_model:
            continue
        n_verdicts += len(vs)
        label = _majority([v.label for v in vs])
        categories = Counter(v.error_category for v in vs if v.label == label and v.error_category)
        category = max(sorted(categories), key=lambda c: categories[c]) if categories else None
        items.append(
            LabelledItem(iid, str(snap.get("passage", iid)), label, len(vs), snap, snap.get("model"), category)
        )
    return items, n_verdicts


def panel_items(
    db: DurableStore, tenant: str, candidate_model: str | None = None
) -> tuple[list[LabelledItem], int, int]:
    """Items with a conclusive panel label (latest wins), the number of such labels, and unlinked ones skipped."""
    latest: dict[str, Any] = {}
    unlinked = 0
    n = 0
    for a in db.adjudications(tenant):
        if a.status != "done" or a.label is None:
            continue
        if a.item_id is None or not a.snapshot:
            unlinked += 1
            continue
        if candidate_model is not None and a.snapshot.get("model") != candidate_model:
            continue
        n += 1
        latest[a.item_id] = a
    items = [
        LabelledItem(iid, str(a.snapshot.get("passage", iid)), a.label, 1, a.snapshot, a.snapshot.get("model"))
        for iid, a in latest.items()
    ]
    return items, n, unlinked
