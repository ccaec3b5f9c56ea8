"""The codebase's one chrF (sacrebleu): hand-computed scores, and the cached all-pairs matrix against pair by pair."""

from __future__ import annotations

import numpy as np
import pytest

from service.core.chrf import chrf, pairwise_chrf

TOL = 1e-9
ENGLISH = (
    "So I have heard. At one time the Buddha was staying near Sāvatthī in Jeta's Grove, Anāthapiṇḍika's monastery."
)


@pytest.mark.parametrize(
    ("hyp", "ref", "expected"),
    [
        ("abc def", "abc def", 100.0),
        ("abc", "xyz", 0.0),
        ("", "abc", 0.0),
        ("abc", "", 0.0),
        ("a b", "ab", 100.0),  # whitespace is ignored
        ("a\u00a0b\tc\n", "abc", 100.0),  # any Unicode whitespace
        ("A", "a", 0.0),  # case is kept
        ("sa\u0304vatthi\u0304", "sāvatthī", 100.0),  # decomposed macrons compare as composed (NFC)
        # 1-grams P 1, R 2/3; 2-grams P 1, R 1/2; no 3-gram in the hypothesis: F2 of P 1, R 7/12 = 7/11
        ("ab", "abc", 100 * 7 / 11),
        # the other way round: P 7/12, R 1 -> 7/8 (beta 2 weighs recall: dropping content costs more than adding)
        ("abc", "ab", 100 * 7 / 8),
        # orders 1-4 match 3/4, 2/3, 1/2, 0 on both sides: P = R = 23/48
        ("abcd", "abce", 100 * 23 / 48),
    ],
)
def test_chrf_table(hyp: str, ref: str, expected: float) -> None:
    assert chrf(hyp, ref) == pytest.approx(expected, abs=TOL)


TEXTS = [
    "",
    "   ",
    "a",
    "ab",
    "abc",
    "abce",
    "abcd",
    ENGLISH,
    ENGLISH[:40],
    ENGLISH.replace("ā", "a\u0304"),
    "from a place where there is a boot, " * 30,
]


def test_pairwise_chrf_equals_chrf_for_every_ordered_pair() -> None:
    got = pairwise_chrf(TEXTS)
    assert got.shape == (len(TEXTS), len(TEXTS))
    assert np.isnan(np.diag(got)).all()
    expected = np.array([[chrf(h, r) if i != j else np.nan for j, r in enumerate(TEXTS)] for i, h in enumerate(TEXTS)])
    np.testing.assert_allclose(got, expected, rtol=0.0, atol=TOL)
    # the table covers asymmetric pairs, so a transposed matrix would fail
    assert not np.allclose(np.nan_to_num(got), np.nan_to_num(got.T), atol=1e-3)


@pytest.mark.parametrize("texts", [[], ["only one"]])
def test_pairwise_chrf_of_fewer_than_two_texts_has_no_pairs(texts: list[str]) -> None:
    assert np.isnan(pairwise_chrf(texts)).all() and pairwise_chrf(texts).shape == (len(texts), len(texts))
