"""The translator signal: how far a translator sits from its peers over a batch of passages (batch-level)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.core.signals.base import NEEDS_TWO, CandidateSignals, FamilyRows, Passage
from service.core.types import SignalResult, SignalSkipped, SignalValue

__all__ = ["Translator", "add_translator_signal"]

TRANSLATOR_SIGNAL = "translator_peer_distance"


class Translator:
    """``translator_peer_distance`` per passage is only a placeholder skip: ``add_translator_signal`` fills it in
    when the caller scores many passages at once."""

    names = (TRANSLATOR_SIGNAL,)
    peer_names = names

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        rows = FamilyRows(passage.n)
        rows.skip(TRANSLATOR_SIGNAL, NEEDS_TWO if passage.n < 2 else "batch-level signal; needs add_translator_signal")
        return rows.rows


def add_translator_signal(
    batch: Sequence[Sequence[CandidateSignals]],
    *,
    base: str = "peer_centroid_distance",
    name: str = TRANSLATOR_SIGNAL,
    min_passages: int = 20,
) -> None:
    """Batch-level signal, added in place: how far a translator (``CandidateSignals.model``) sits from its peers on
    average over the batch's passages.

    For every passage the ``base`` signal is centred on the passage median (so easy and hard passages weigh alike),
    then averaged per translator over the batch. Reference-free: it needs only peers and model names, no labels.
    A translator seen in fewer than ``min_passages`` passages, or a candidate without a model name, gets a skip
    with the reason (a mean over a handful of passages is noise).
    """
    sums: dict[str, float] = {}
    counts: dict[str, int] = {}
    for passage in batch:
        vals = [(cs.model, cs.signals.get(base)) for cs in passage]
        got = [(m, r.value) for m, r in vals if m is not None and isinstance(r, SignalValue)]
        if len(got) < 2:
            continue
        med = float(np.median([v for _, v in got]))
        for m, v in got:
            sums[m] = sums.get(m, 0.0) + (v - med)
            counts[m] = counts.get(m, 0) + 1
    for passage in batch:
        for cs in passage:
            if cs.model is None:
                cs.signals[name] = SignalSkipped(reason="the candidate has no model name")
            elif counts.get(cs.model, 0) < min_passages:
                cs.signals[name] = SignalSkipped(
                    reason=f"{cs.model!r} has {base} in {counts.get(cs.model, 0)} passages of this batch; "
                    f"needs {min_passages}"
                )
            else:
                cs.signals[name] = SignalValue(
                    value=sums[cs.model] / counts[cs.model], detail={"passages": counts[cs.model], "base": base}
                )
