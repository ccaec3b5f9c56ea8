"""Source copying: how much of a candidate is words of the source text (graded signal; the hard flag is in flags)."""

from __future__ import annotations

from service.core.signals.base import FamilyRows, Passage
from service.core.text import get_normaliser
from service.core.types import SignalResult

__all__ = ["SourceCopy", "copy_stats"]


def copy_stats(source: str, candidate: str, source_lang: str) -> tuple[float, int, int]:
    """(share of candidate tokens that are source tokens, longest run of such tokens, candidate tokens).

    Tokens of at least three letters, normalised with the source language's rules so a copied ṁ/ṃ still matches.
    """
    norm = get_normaliser(source_lang)
    src_tokens = set(norm.word_tokens(source))
    cand = [t for t in norm.word_tokens(candidate) if len(t) >= 3]
    if not cand:
        return 0.0, 0, 0
    hits = [t in src_tokens for t in cand]
    run = best = 0
    for h in hits:
        run = run + 1 if h else 0
        best = max(best, run)
    return sum(hits) / len(hits), best, len(cand)


class SourceCopy:
    """``source_copy_share``: the share of candidate words that are source words (detail: longest run, tokens)."""

    names = ("source_copy_share",)
    peer_names: tuple[str, ...] = ()

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        rows = FamilyRows(passage.n)
        copy = [copy_stats(passage.source, c, passage.source_lang) for c in passage.candidates]
        rows.put("source_copy_share", [s for s, _, _ in copy], [{"longest_run": r, "tokens": t} for _, r, t in copy])
        return rows.rows
