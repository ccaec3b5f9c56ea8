"""Novelty as the API serves it: validation of the text, the index lookup, the response shape."""

from __future__ import annotations

import msgspec

from service.app.novelty.schemas import NoveltyOut
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex, NoveltyResult
from service.core.novelty_report import figures_of, index_signature
from service.core.text import require_text

__all__ = ["check_text", "novelty_of_passage", "novelty_of_text", "to_out"]


def check_text(text: str, *, field: str, max_chars: int) -> str:
    """The text, or a clear 422: empty, whitespace-only and over-long texts are refused."""
    return require_text(text, field=field, max_chars=max_chars, setting="TRISK_MAX_TEXT_CHARS")


def to_out(result: NoveltyResult, index: NoveltyIndex) -> NoveltyOut:
    figures = msgspec.structs.asdict(figures_of(result, index))
    return NoveltyOut(**figures, signature=index_signature(index))


def novelty_of_text(resources: Resources, text: str, lang: str) -> NoveltyOut:
    check_text(text, field="text", max_chars=resources.settings.limits.max_text_chars)
    index = resources.index_for(lang)
    return to_out(index.score(text), index)


def novelty_of_passage(resources: Resources, passage_id: str, lang: str) -> NoveltyOut:
    index = resources.index_for(lang)
    return to_out(index.passage(passage_id), index)
