"""Request and response types of the novelty endpoints."""

from __future__ import annotations

import msgspec

from service.core.novelty_report import NeighbourOut, NoveltyFigures
from service.core.records import LangCode, Text

__all__ = ["NeighbourOut", "NoveltyOut", "NoveltyRequest"]


class NoveltyRequest(msgspec.Struct, forbid_unknown_fields=True):
    """A source text to score; ``lang`` is an ISO 639 code with an index loaded (``pli`` by default)."""

    text: Text
    lang: LangCode = "pli"


class NoveltyOut(NoveltyFigures, frozen=True, kw_only=True):
    """The novelty of one source text, with the signature of the index it was scored against."""

    signature: dict[str, object]
