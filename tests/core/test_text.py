"""Pali normalisation and tokenisation, and the generic fallback."""

from __future__ import annotations

import unicodedata

import pytest

from service.core.text import content_tokens, get_normaliser, normalise, word_tokens
from service.platform.errors import UnknownLanguage


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Cittaṁ", "cittaṃ"),  # ṁ -> ṃ, lowercase
        (unicodedata.normalize("NFD", "Sāriputta"), "sāriputta"),  # NFD input composes to NFC
        ("EVAṀ ME SUTAṀ", "evaṃ me sutaṃ"),
    ],
)
def test_pali_normalise(text: str, expected: str) -> None:
    assert normalise(text, "pli") == expected
    assert unicodedata.is_normalized("NFC", normalise(text, "pli"))


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # punctuation, quotes and elided ’ti split tokens; short tokens and particles are dropped
        ("“Yato kho, bhikkhave, bhikkhuno paññāya cittaṁ", ["bhikkhave", "bhikkhuno", "paññāya", "cittaṃ"]),
        ("pajānāmī’ti.", ["pajānāmī"]),
        ("Evaṃ me sutaṃ—ekaṃ samayaṃ bhagavā", ["sutaṃ", "ekaṃ", "samayaṃ", "bhagavā"]),  # evaṃ is a particle
        ("atha kho āyasmā ānando", ["āyasmā", "ānando"]),
        ("seyyathidaṃ: rūpaṃ 12 vedanā…", ["rūpaṃ", "vedanā"]),  # digits and ellipsis separate, particle dropped
    ],
)
def test_pali_content_tokens(text: str, expected: list[str]) -> None:
    assert content_tokens(text, "pli") == expected


def test_word_tokens_keep_short_words() -> None:
    assert word_tokens("na ca me", "pli") == ["na", "ca", "me"]


def test_pi_is_pali_and_generic_fallback() -> None:
    assert get_normaliser("pi").lang == "pli"
    en = get_normaliser("en")
    assert en.content_tokens("The Buddha was staying at Sāvatthī.") == ["the", "buddha", "was", "staying", "sāvatthī"]


@pytest.mark.parametrize("code", ["", "english!", "x", "toolong"])
def test_bad_language_codes(code: str) -> None:
    with pytest.raises(UnknownLanguage):
        get_normaliser(code)
