"""The translation lexicon (Pali stem <-> English stem probabilities learned by word alignment), loaded once.

The artifact is ``models/lexicon/pli-en.json.gz``: gzip of one JSON object with the build's signature (corpus sha256,
parameters, library versions, format version), ``pali`` (stem -> [[English stem, p(English | stem)], ...]),
``english`` (English stem -> [[Pali stem, p(stem | English)], ...]) and ``pali_count`` (training frequency per stem).
``service.core.critical.build_lexicon`` writes it.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import msgspec

from service.core.critical.build_glossary import EN_STOP
from service.core.critical.tokens import en_stem, pali_stem, pali_tokens, word_tokens
from service.platform.errors import InputError

__all__ = [
    "EN_NEGATORS",
    "FORMAT_VERSION",
    "LEXICON_FILE",
    "PALI_NEGATORS",
    "LexiconFile",
    "LexiconParams",
    "TranslationLexicon",
    "content_word",
    "english_stems",
    "load_translation_lexicon",
    "pali_stems",
]

FORMAT_VERSION = 1
LEXICON_FILE = Path(__file__).resolve().parents[3] / "models" / "lexicon" / "pli-en.json.gz"
# Negators are content for the lexicon (na -> not); other function words are not.
EN_NEGATORS = frozenset({"not", "no", "never", "nor", "without", "cannot", "neither", "none", "nothing"})
PALI_NEGATORS = frozenset({"na", "no", "mā", "natthi", "neva", "nāpi", "nahi"})
# English words a privative (a-/an-) Pali word is rendered with: a negator, or a word with a negative prefix/suffix
_NEG_PREFIXES = ("un", "in", "im", "ir", "dis", "non")
_NEG_SUFFIX = "less"
_GROUP = 4  # Pali stems sharing their first four letters are one word's family in term_origin


@dataclass(frozen=True)
class LexiconParams:
    """Everything that changes the lexicon's numbers; recorded in its signature."""

    aligner: str = "eflomal"
    seed: int = 20260601
    iterations: int = 6  # ibm1 only
    null_prob: float = 0.08  # ibm1 only
    diagonal_tension: float = 4.0  # ibm1 only
    min_count: int = 3  # a stem (either side) seen fewer times in training gets no entry
    min_prob: float = 0.03  # renderings below this probability are pruned
    top: int = 8  # at most this many renderings per stem


class LexiconFile(msgspec.Struct, forbid_unknown_fields=True):
    signature: dict[str, object]
    pali: dict[str, list[tuple[str, float]]]
    english: dict[str, list[tuple[str, float]]]
    pali_count: dict[str, int]


def pali_stems(text: str) -> list[str]:
    """The lexicon's Pali tokens: NFC, lowercase, ṁ -> ṃ, letter runs, crude stems."""
    return [pali_stem(t) for t in pali_tokens(text)]


def english_stems(text: str) -> list[str]:
    """The lexicon's English tokens: letter runs, lowercase, crude stems (every word; the aligner needs them)."""
    return [en_stem(t.lower) for t in word_tokens(text)]


@lru_cache(maxsize=1 << 16)
def content_word(stem: str) -> bool:
    """An English stem that can render Pali content: a negator, or a word of 3+ letters not in the stop list."""
    return stem in EN_NEGATORS or (len(stem) >= 3 and stem not in EN_STOP)


@lru_cache(maxsize=1 << 16)
def negative_word(stem: str) -> bool:
    """An English stem that says "not" by itself (a negator) or by a negative prefix or suffix."""
    return stem in EN_NEGATORS or (len(stem) > 5 and (stem.startswith(_NEG_PREFIXES) or stem.endswith(_NEG_SUFFIX)))


# verbal prefixes that begin with a- and are not the privative (abhi-gacchati, anu-passati, ava-hārati)
_NOT_PRIVATIVE = ("abhi", "adhi", "ajjh", "ati", "apa", "api", "ava", "anu")
_VOWELS = frozenset("aāiīuūeo")


def _privative(stem: str, known: frozenset[str]) -> bool:
    """Whether a Pali stem is a- or an- before a known stem."""
    if len(stem) < 5 or stem[0] != "a" or stem.startswith("ajjh"):  # ajjh- is adhi- before a vowel
        return False
    doubled = stem[1] == stem[2] or (stem.startswith("anu") and len(stem) > 4 and stem[3] == stem[4])
    if stem.startswith(_NOT_PRIVATIVE) and not doubled:
        return False
    if stem[1] == "n" and stem[2] in _VOWELS:
        rest = stem[2:]  # an-attā, an-uppanna
    elif stem[1] == stem[2]:
        rest = stem[2:]  # ap-paṭiladdha
    elif stem[1] not in _VOWELS:
        rest = stem[1:]  # a-kusala
    else:
        return False
    return rest[:5] in known if len(rest) >= 4 else rest in known


class TranslationLexicon:
    """Lookups over a loaded artifact: renderings of a Pali stem, Pali stems an English stem renders, privatives."""

    def __init__(self, data: LexiconFile) -> None:
        self.signature = data.signature
        self.render: dict[str, dict[str, float]] = {k: dict(v) for k, v in data.pali.items()}
        self.source_of: dict[str, dict[str, float]] = {k: dict(v) for k, v in data.english.items()}
        self.count = data.pali_count
        # a privative: a-/an- on a known stem (a-kusala, an-attā, ap-paṭiladdha with the consonant doubled), or a
        # word the lexicon renders mostly with negative English words (anicca -> impermanent)
        known = frozenset(k[:5] for k in self.render if len(k) >= 4) | {k for k in self.render if len(k) == 3}
        self.privative = frozenset(
            s
            for s, r in self.render.items()
            if _privative(s, known) or sum(p for e, p in r.items() if negative_word(e)) >= 0.3
        )
        self.negative_renderings = frozenset(e for s in self.privative for e in self.render[s] if negative_word(e))
        self._origin: dict[str, tuple[str, float, int]] = {}

    @property
    def id(self) -> str:
        return str(self.signature.get("id", ""))

    def is_negator(self, pali_token: str) -> bool:
        """A Pali token that negates: a negator word or a privative compound."""
        return pali_token in PALI_NEGATORS or pali_stem(pali_token) in self.privative

    def term_origin(self, stem: str) -> tuple[str, float, int]:
        """The Pali word an English stem renders, its compounds counted with it (mindfulness renders sati,
        satipaṭṭhāna, sammāsati...): (the shortest stem of the group with the most p(stem | English), that summed
        p, the group's training occurrences). ("", 0.0, 0) when the stem renders nothing."""
        cached = self._origin.get(stem)
        if cached is not None:
            return cached
        groups: dict[str, list[str]] = {}
        for s in self.source_of.get(stem, ()):
            groups.setdefault(s[:_GROUP], []).append(s)
        out = ("", 0.0, 0)
        for members in groups.values():
            p = sum(self.source_of[stem][s] for s in members)
            if p > out[1]:
                out = (min(members, key=lambda s: (len(s), s)), p, sum(self.count.get(s, 0) for s in members))
        self._origin[stem] = out
        return out

    def best_source(self, stem: str) -> tuple[str, float] | None:
        """The Pali stem an English stem most often renders, with p(stem | English)."""
        cands = self.source_of.get(stem)
        if not cands:
            return None
        return max(cands.items(), key=lambda kv: (kv[1], kv[0]))


def load_translation_lexicon(path: Path | None = None) -> TranslationLexicon:
    """Read the artifact (by default under the configured models directory) and check its format version."""
    if path is None:
        from service.platform.settings import get_settings

        path = get_settings().risk.lexicon_dir / LEXICON_FILE.name
    data = msgspec.json.decode(gzip.decompress(path.read_bytes()), type=LexiconFile)
    version = data.signature.get("format_version")
    if version != FORMAT_VERSION:
        raise InputError(f"{path}: lexicon format {version}, this trisk reads format {FORMAT_VERSION}; rebuild it")
    return TranslationLexicon(data)
