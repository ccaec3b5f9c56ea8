"""The novelty of a source text as results carry it: rounded figures in typed structs, or a visible skip.

One conversion from the index's ``NoveltyResult``, shared by the novelty endpoint, assessments (stored with the
request), workers (batch items) and benchmarks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

import msgspec

from service.core.novelty import NoveltyIndex, NoveltyResult
from service.core.text import get_normaliser
from service.platform.errors import InputError

__all__ = [
    "NeighbourOut",
    "NoveltyFigures",
    "NoveltyPending",
    "NoveltySkipped",
    "NoveltyValue",
    "SourceNovelty",
    "figures_of",
    "index_signature",
    "source_novelty",
]


class NeighbourOut(msgspec.Struct, frozen=True):
    """One of the nearest corpus passages (char 3-5-gram TF-IDF cosine)."""

    passage_id: str
    similarity: float


class NoveltyFigures(msgspec.Struct, frozen=True, kw_only=True):
    """The novelty of one source text: the combined index, its components raw and z-scored, and where it falls."""

    index: float
    band: str  # low | middle | high (corpus terciles)
    percentile: float  # 0-100 among the corpus's eligible passages
    raw: dict[str, float]
    z: dict[str, float]
    neighbours: list[NeighbourOut]
    content_tokens: int
    eligible: bool
    excluded_by: list[str]
    source: str  # "corpus" (a corpus passage's stored values) or "computed"
    lang: str
    passage_id: str | None = None


class NoveltyValue(NoveltyFigures, tag="value", tag_field="status", frozen=True, kw_only=True):
    """Novelty computed for the source of an assessment."""


class NoveltySkipped(msgspec.Struct, tag="skipped", tag_field="status", frozen=True):
    """Novelty could not be computed for this source, and why (never a made-up number)."""

    reason: str


class NoveltyPending(msgspec.Struct, tag="pending", tag_field="status", frozen=True):
    """Novelty is computed by the worker with the rest of the cheap tier (batch items: a 5,000-item batch must not
    hold the API for the ~20 ms per text it costs)."""


SourceNovelty = NoveltyValue | NoveltySkipped | NoveltyPending


_F = TypeVar("_F", bound=NoveltyFigures)


def _build(cls: type[_F], result: NoveltyResult, index: NoveltyIndex) -> _F:
    return cls(
        index=round(result.index, 6),
        band=result.band,
        percentile=round(result.percentile, 3),
        raw={k: round(v, 6) for k, v in result.raw.items()},
        z={k: round(v, 6) for k, v in result.z.items()},
        neighbours=[NeighbourOut(n.passage_id, n.similarity) for n in result.neighbours],
        content_tokens=result.content_tokens,
        eligible=result.eligible,
        excluded_by=list(result.excluded_by),
        source=result.source,
        lang=index.lang,
        passage_id=result.passage_id,
    )


def figures_of(result: NoveltyResult, index: NoveltyIndex) -> NoveltyFigures:
    return _build(NoveltyFigures, result, index)


def index_signature(index: NoveltyIndex) -> dict[str, object]:
    """The parts of an index's signature a result needs to be reproduced."""
    sig = index.signature
    keep = ("id", "name", "lang", "passages", "eligible_passages", "corpus_sha256", "params", "libraries", "built_at")
    return {k: sig[k] for k in keep if k in sig}


def source_novelty(indexes: Mapping[str, NoveltyIndex], text: str, lang: str) -> tuple[SourceNovelty, str | None]:
    """The novelty of an assessment's source and the signature id of the index used, or a visible skip (no index
    for the language, no content words). CPU work of ~20 ms: callers on an event loop run it in a thread."""
    code = get_normaliser(lang).lang
    index = indexes.get(code)
    if index is None:
        reason = f"no novelty index for language {code!r}" if indexes else "no novelty index loaded"
        return NoveltySkipped(reason=reason), None
    try:
        result = index.score(text)
    except InputError as exc:
        return NoveltySkipped(reason=exc.detail), index.signature_id
    return _build(NoveltyValue, result, index), index.signature_id
