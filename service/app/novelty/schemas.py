"""Request and response types of the novelty endpoints."""

from __future__ import annotations

import msgspec

__all__ = ["NeighbourOut", "NoveltyOut", "NoveltyRequest"]


class NoveltyRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A source text to score; ``lang`` is an ISO 639 code with an index loaded (``pli`` by default)."""

    text: str
    lang: str = "pli"


class NeighbourOut(msgspec.Struct):
    passage_id: str
    similarity: float


class NoveltyOut(msgspec.Struct):
    """The novelty of one source text: the combined index, its components raw and z-scored, and where it falls."""

    index: float
    band: str
    percentile: float
    raw: dict[str, float]
    z: dict[str, float]
    neighbours: list[NeighbourOut]
    content_tokens: int
    eligible: bool
    excluded_by: list[str]
    source: str
    lang: str
    signature: dict[str, object]
    passage_id: str | None = None
