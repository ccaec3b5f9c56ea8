"""Source novelty passed through to every candidate, so a risk model can use it."""

from __future__ import annotations

from service.core.signals.base import FamilyRows, Passage
from service.core.types import SignalResult

__all__ = ["Novelty"]


class Novelty:
    """``novelty``: the source passage's novelty, the same for every candidate (looked up by the caller)."""

    names = ("novelty",)
    peer_names: tuple[str, ...] = ()

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        if passage.novelty is None:
            rows = FamilyRows(passage.n)
            rows.skip("novelty", "source novelty was not looked up")
            return rows.rows
        return [{"novelty": passage.novelty} for _ in range(passage.n)]
