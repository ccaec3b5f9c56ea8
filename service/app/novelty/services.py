"""Novelty as the API serves it: validation of the text, the index lookup, the response shape."""

from __future__ import annotations

from service.app.novelty.schemas import NeighbourOut, NoveltyOut
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex, NoveltyResult
from service.core.text import require_text

__all__ = ["check_text", "novelty_of_passage", "novelty_of_text", "to_out"]


def check_text(text: str, *, field: str, max_chars: int) -> str:
    """The text, or a clear 422: empty, whitespace-only and over-long texts are refused."""
    return require_text(text, field=field, max_chars=max_chars, setting="TRISK_MAX_TEXT_CHARS")


def signature_of(index: NoveltyIndex) -> dict[str, object]:
    sig = index.signature
    keep = ("id", "name", "lang", "passages", "eligible_passages", "corpus_sha256", "params", "libraries", "built_at")
    return {k: sig[k] for k in keep if k in sig}


def to_out(result: NoveltyResult, index: NoveltyIndex) -> NoveltyOut:
    return NoveltyOut(
        index=round(result.index, 6),
        band=result.band,
        percentile=round(result.percentile, 3),
        raw={k: round(v, 6) for k, v in result.raw.items()},
        z={k: round(v, 6) for k, v in result.z.items()},
        neighbours=[NeighbourOut(n.passage_id, n.similarity) for n in result.neighbours],
        content_tokens=result.content_tokens,
        eligible=result.eligible,
        excluded_by=result.excluded_by,
        source=result.source,
        lang=index.lang,
        signature=signature_of(index),
        passage_id=result.passage_id,
    )


def novelty_of_text(resources: Resources, text: str, lang: str) -> NoveltyOut:
    check_text(text, field="text", max_chars=resources.settings.limits.max_text_chars)
    index = resources.index_for(lang)
    return to_out(index.score(text), index)


def novelty_of_passage(resources: Resources, passage_id: str, lang: str) -> NoveltyOut:
    index = resources.index_for(lang)
    return to_out(index.passage(passage_id), index)
