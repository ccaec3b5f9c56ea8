"""The one chrF of the codebase: sacrebleu's CHRF (character 1-6-grams, beta 2, whitespace ignored, 0-100 scale)."""

from __future__ import annotations

import unicodedata
from collections.abc import Sequence

import numpy as np
from sacrebleu.metrics import CHRF
from sacrebleu.metrics.helpers import extract_all_char_ngrams

__all__ = ["chrf", "pairwise_chrf"]

# sacrebleu's defaults, spelled out because pairwise_chrf depends on them: character n-grams only (word_order 0, so
# the statistics are one [hypothesis, reference, match] triple per character order), effective-order averaging
# (no eps smoothing), case kept. beta 2 weighs recall: a hypothesis that drops content the reference has scores low.
_CHRF = CHRF(char_order=6, word_order=0, beta=2, lowercase=False, whitespace=False, eps_smoothing=False)


def _prepare(text: str) -> str:
    # sacrebleu compares code points: composed first, so a decomposed "ā" (a + combining macron) matches "ā"
    return unicodedata.normalize("NFC", text)


def chrf(hypothesis: str, reference: str) -> float:
    """chrF of one hypothesis against one reference, 0-100."""
    return float(_CHRF.sentence_score(_prepare(hypothesis), [_prepare(reference)]).score)


def pairwise_chrf(texts: Sequence[str]) -> np.ndarray:
    """(n, n) matrix with [i, j] = chrf(texts[i], texts[j]) (texts[i] the hypothesis), NaN on the diagonal.

    The same numbers as ``chrf`` pair by pair, at a fraction of the cost for n texts (peer chrF is n * (n - 1)
    pairs of texts up to tens of thousands of characters): each text's n-grams are extracted once, and each
    unordered pair is matched once, since the match count (sum of the smaller counts) is symmetric. sacrebleu
    extracts the n-grams, counts the matches and computes the F-score (through CHRF's own per-segment helpers,
    which are not public API: tests/core/test_chrf.py checks every pair against ``chrf``).
    """
    grams = [extract_all_char_ngrams(_prepare(t), _CHRF.char_order, _CHRF.whitespace) for t in texts]
    totals = [[sum(g.values()) for g in per_order] for per_order in grams]
    n = len(texts)
    out = np.full((n, n), np.nan)
    for i in range(n):
        for j in range(i + 1, n):
            forward: list[int] = []
            backward: list[int] = []
            for order, (gi, gj) in enumerate(zip(grams[i], grams[j], strict=True)):
                stats = _CHRF._get_match_statistics(gi, gj)
                forward.extend(stats)
                # sacrebleu would report 0 hypothesis n-grams for an order the reference lacks; its F-score skips
                # an order with an empty side either way (effective order), so the plain totals score the same
                backward.extend((totals[j][order], totals[i][order], stats[2]))
            out[i, j] = _CHRF._compute_f_score(forward)
            out[j, i] = _CHRF._compute_f_score(backward)
    return out
