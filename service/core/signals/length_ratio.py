"""Length ratio of each candidate to the source, as a z-score against the corpus length model."""

from __future__ import annotations

import math

from service.core.signals.base import FamilyRows, Passage
from service.core.signals.length_model import letter_count
from service.core.types import SignalResult

__all__ = ["LengthRatio"]


class LengthRatio:
    """``length_ratio_z`` (|z| of log(candidate letters / source letters); detail: signed z) and
    ``length_ratio_short_z`` (only the too-short side)."""

    names = ("length_ratio_z", "length_ratio_short_z")
    peer_names: tuple[str, ...] = ()

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        rows = FamilyRows(passage.n)
        model = passage.length_model
        src_letters = letter_count(passage.source)
        if model is None:
            for name in self.names:
                rows.skip(name, f"no length model for {passage.source_lang}-{passage.target_lang}")
        elif src_letters == 0:
            for name in self.names:
                rows.skip(name, "the source has no letters")
        else:
            zs = [(math.log(max(letter_count(c), 1) / src_letters) - model.mean) / model.sd for c in passage.candidates]
            rows.put("length_ratio_z", [abs(z) for z in zs], [{"signed_z": z} for z in zs])
            rows.put("length_ratio_short_z", [max(0.0, -z) for z in zs])
        return rows.rows
