"""Per-language normalisation and tokenisation (Pali rules from the research; a generic Unicode fallback)."""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

from service.platform.errors import InputError, UnknownLanguage

__all__ = [
    "KNOWN_LANGUAGES",
    "PALI_PARTICLES",
    "Normaliser",
    "content_tokens",
    "get_normaliser",
    "normalise",
    "require_text",
    "script_words",
    "word_tokens",
]

# Letters plus combining marks; everything else (punctuation, digits, quotes, ellipsis) separates tokens.
_WORD_RE = re.compile(r"[^\W\d_]+(?:[\u0300-\u036f][^\W\d_]*)*", re.UNICODE)

# Common Pali particles and enclitics (research: "atha, ca, eva, evaṃ, iti, kho, pana, pi, vā and the like").
# Most are under four characters and fall to the length rule anyway; the list keeps the rule explicit.
PALI_PARTICLES: frozenset[str] = frozenset(
    (
        "atha ca eva evaṃ iti kho pana pi api vā hi tu nu ce yadi yathā tathā tatra tattha idha ettha kiṃ kinti "
        "kacci nanu nāma handa sace yato tato yadā tadā atho athavā seyyathidaṃ seyyathāpi evameva evamevaṃ"
    ).split()
)


@dataclass(frozen=True)
class Normaliser:
    """The normalisation rules of one language."""

    lang: str
    min_token_chars: int
    stopwords: frozenset[str]
    folds: tuple[tuple[str, str], ...] = ()

    def normalise(self, text: str) -> str:
        out = unicodedata.normalize("NFC", text).lower()
        for old, new in self.folds:
            out = out.replace(old, new)
        return out

    def word_tokens(self, text: str) -> list[str]:
        return _WORD_RE.findall(self.normalise(text))

    def content_tokens(self, text: str) -> list[str]:
        return [t for t in self.word_tokens(text) if len(t) >= self.min_token_chars and t not in self.stopwords]


_PALI = Normaliser(lang="pli", min_token_chars=4, stopwords=PALI_PARTICLES, folds=(("ṁ", "ṃ"),))
_NORMALISERS: dict[str, Normaliser] = {"pli": _PALI}
# Languages with the generic fallback; more are admitted by indexing a corpus with --lang.
_GENERIC = ("en", "san", "sa", "pi", "zh", "bo", "te", "de", "fr", "es", "it", "pt", "ru", "ja", "ko", "hi", "th", "my")
KNOWN_LANGUAGES: frozenset[str] = frozenset(set(_NORMALISERS) | set(_GENERIC))

_LANG_RE = re.compile(r"^[a-z]{2,3}$")


def get_normaliser(lang: str) -> Normaliser:
    """The normaliser for ``lang``; unknown-but-valid ISO 639 codes get the generic Unicode fallback."""
    lang = lang.strip().lower()
    if lang == "pi":  # ISO 639-1 for Pali
        lang = "pli"
    if lang in _NORMALISERS:
        return _NORMALISERS[lang]
    if not _LANG_RE.match(lang):
        raise UnknownLanguage(f"language code {lang!r} is not an ISO 639 code")
    return Normaliser(lang=lang, min_token_chars=3, stopwords=frozenset())


def normalise(text: str, lang: str = "pli") -> str:
    return get_normaliser(lang).normalise(text)


def word_tokens(text: str, lang: str = "pli") -> list[str]:
    return get_normaliser(lang).word_tokens(text)


def content_tokens(text: str, lang: str = "pli") -> list[str]:
    return get_normaliser(lang).content_tokens(text)


# scripts written without spaces between words: each character is a word of its own for matching
_UNSPACED = ((0x3040, 0x30FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF), (0x20000, 0x2FA1F))
_JOINERS = frozenset("\u200c\u200d")  # ZWNJ/ZWJ sit inside Indic words


def _unspaced(ch: str) -> bool:
    cp = ord(ch)
    return any(lo <= cp <= hi for lo, hi in _UNSPACED)


def script_words(text: str) -> list[str]:
    """Whole words of any script, for matching answer words and names (not for the novelty index).

    NFKC, casefold; a word is a maximal run of letters, combining marks (Telugu vowel signs are marks, which
    ``word_tokens`` would split on), digits and zero-width joiners; a CJK or kana character is a word by itself.
    """
    words: list[str] = []
    current: list[str] = []
    for ch in unicodedata.normalize("NFKC", text).casefold():
        if _unspaced(ch):
            if current:
                words.append("".join(current))
                current = []
            words.append(ch)
        elif unicodedata.category(ch)[0] in "LMN" or ch in _JOINERS:
            current.append(ch)
        elif current:
            words.append("".join(current))
            current = []
    if current:
        words.append("".join(current))
    return words


def require_text(text: str, *, field: str, max_chars: int, setting: str | None = None) -> str:
    """The text, or an InputError (422) naming the field: empty, whitespace-only and over-long texts are refused."""
    if not text or not text.strip():
        raise InputError(f"{field} is empty", extra={"field": field})
    if len(text) > max_chars:
        where = f" ({setting})" if setting else ""
        raise InputError(
            f"{field} has {len(text)} characters; the limit is {max_chars}{where}",
            extra={"field": field, "limit": max_chars},
        )
    return text
