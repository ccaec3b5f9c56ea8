"""Small tokenisers for the critical-content checks: Pali and English words, diacritic folding, crude stems."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

__all__ = [
    "Token",
    "en_stem",
    "fold",
    "pali_stem",
    "pali_tokens",
    "privative",
    "word_tokens",
]

# Letters and combining marks; apostrophes split tokens (Pali elision "n’atthi", English "don't" -> "don", "t").
_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
# Sentence starts: the first word after these is capitalised for grammar, not because it is a name.
_SENT_END = re.compile(r"[.!?:;\u201c\u2018\"(\u2014]\s*$")


class Token:
    """A word with its position and whether grammar (not naming) explains its capital letter."""

    __slots__ = ("capital", "lower", "sentence_start", "start", "text")

    def __init__(self, text: str, start: int, sentence_start: bool) -> None:
        self.text = text
        self.lower = text.lower()
        self.start = start
        self.capital = text[:1].isupper()
        self.sentence_start = sentence_start

    def __repr__(self) -> str:
        return f"Token({self.text!r})"


def _nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


def word_tokens(text: str) -> list[Token]:
    """Letter-run tokens of ``text`` (NFC), marking those that open a sentence or a quotation."""
    text = _nfc(text)
    out: list[Token] = []
    prev_end = 0
    for m in _WORD.finditer(text):
        # Sentence start: beginning of text, or the gap since the previous word closes a sentence / opens a quote.
        # Only a capital letter needs explaining, so lowercase words skip the look-back.
        start = False
        if m.group(0)[:1].isupper():
            gap = text[prev_end : m.start()]
            start = not out or bool(_SENT_END.search(gap.rstrip("\u2019\u201d' ")) or _SENT_END.search(gap))
        out.append(Token(m.group(0), m.start(), start))
        prev_end = m.end()
    return out


def pali_tokens(text: str) -> list[str]:
    """Pali word tokens: NFC, lowercase, ṁ -> ṃ, letter runs (elision apostrophes split tokens)."""
    text = _nfc(text).lower().replace("ṁ", "ṃ")
    return _WORD.findall(text)


@lru_cache(maxsize=1 << 16)  # words repeat heavily across candidates; folding is the hot spot
def fold(word: str) -> str:
    """Lowercase and strip diacritics (Sāriputta -> sariputta; ṃ -> m) so English and Pali spellings meet."""
    decomposed = unicodedata.normalize("NFD", word.lower().replace("ṁ", "ṃ"))
    return "".join(c for c in decomposed if not unicodedata.combining(c))


# Pali nominal/verbal endings, longest first; stripping them groups inflections (dukkhaṃ, dukkhassa -> dukkh).
_PALI_ENDINGS = sorted(
    [
        "ānaṃ",
        "īnaṃ",
        "ūnaṃ",
        "ehi",
        "ebhi",
        "esu",
        "assa",
        "āya",
        "asmiṃ",
        "amhā",
        "amhi",
        "asmā",
        "ena",
        "ato",
        "āni",
        "āyo",
        "iyo",
        "īhi",
        "ūhi",
        "īsu",
        "ūsu",
        "inaṃ",
        "unaṃ",
        "iyaṃ",
        "uno",
        "ino",
        "aṃ",
        "iṃ",
        "uṃ",
        "ā",
        "o",
        "e",
        "a",
        "ī",
        "i",
        "ū",
        "u",
    ],
    key=len,
    reverse=True,
)


def pali_stem(token: str, min_len: int = 4) -> str:
    """A crude Pali stem: strip the longest known ending while at least ``min_len`` letters remain."""
    for end in _PALI_ENDINGS:
        if token.endswith(end) and len(token) - len(end) >= min_len:
            return token[: -len(end)]
    return token


@lru_cache(maxsize=1 << 16)
def en_stem(word: str) -> str:
    """A crude English stem (folded, plural endings off), so 'sufferings' meets 'suffering'."""
    w = fold(word)
    if len(w) > 4 and w.endswith("ies"):
        return w[:-3] + "y"
    if len(w) > 4 and w.endswith("s") and not w.endswith("ss") and not w.endswith("us"):
        w = w[:-1]
    return w


# words that start with "un" or end in "less" without negating a stem (understand, universal, until, unless)
_NOT_PRIVATIVE = ("under", "uni", "unti", "unto", "unle", "unus")


def privative(word: str) -> str | None:
    """The stem an English privative negates ("undeveloped" -> "developed", "deathless" -> "death"), or None.

    A privative says what "not" says (undeveloped, not developed), so the located negation comparison lets it
    answer a peer's "not"; it is no negator of its own (unskillful and bad are both renderings of akusala)."""
    w = word.lower()
    if len(w) >= 7 and w.startswith("un") and not w.startswith(_NOT_PRIVATIVE):
        return w[2:]
    if len(w) >= 8 and w.endswith("less") and not w.endswith(("theless", "regardless")):
        return w[:-4]
    return None
