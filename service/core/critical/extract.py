"""Critical-content extraction: numbers, names, negators, list sizes and doctrinal terms of a Pali or English text."""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterator

from service.core.critical.align import Parsed, parse
from service.core.critical.lexicon import Lexicon, PatternSet
from service.core.critical.tokens import en_stem, fold, pali_stem, pali_tokens, word_tokens

__all__ = ["Content", "Extractor", "Mark", "listed_counts", "number_word"]

# Pali negators. Sandhi forms (nāhaṃ = na ahaṃ, netaṃ = na etaṃ) are listed; the "a-/an-" privative prefix is
# not, because it is not reliable (anicca, but also ananda, akāsi). "no" is also the enclitic "us/our", so weak.
PALI_NEG = frozenset(
    """na mā natthi neva nāpi nāhaṃ netaṃ neso nesā nayidaṃ nāyaṃ nassa nāssa nālaṃ nāssu nahi nevaṃ nāham
    nāññaṃ nāsi natthī nāsaṃ nābhavi nāsakkhi nāssādesi nayimaṃ nāyasmā nevassa""".split()
)
PALI_NEG_WEAK = frozenset({"no", "n"})  # "n" is the elided "na" of n’atthi; "no" doubles as a pronoun
# English negators ("non" as in non-self, beside not-self); un-/in- prefixes are left out of the count (unskillful,
# impermanent are the accepted renderings): the located comparison reads them as answering a "not" (tokens.privative).
EN_NEG = frozenset("not non no never nor neither none nothing nobody nowhere without cannot".split())
_EN_NT = re.compile(r"n['’]t\b", re.IGNORECASE)
_DIGITS = re.compile(r"(?<![\w.,])(\d{1,7})(?![\w.,]\d)")
_PALI_DIACRITICS = frozenset("āīūṃṅñṭḍṇḷ")
_LIST_NOUNS = (
    "things|qualities|factors|kinds|types|ways|aspects|grounds|reasons|benefits|drawbacks|dangers|"
    "perils|rewards|powers|strengths|bonds|fetters|hindrances|elements|aggregates|faculties|cases|"
    "people|persons|individuals|sorts|categories|practices|dimensions|fields|spheres|truths|steps|"
    "conditions|principles|attributes|characteristics|features|defilements|errors|kinds"
)


# (kind, value, start, end): what ``Extractor.english_marks`` found and where, in the NFC text
Mark = tuple[str, int | str, int, int]


class Content:
    """What a text commits to: number values (strong and weak), name keys, negator count, list sizes, terms."""

    __slots__ = (
        "clauses",
        "folded",
        "listed",
        "lists",
        "name_forms",
        "names",
        "names_unknown",
        "neg",
        "neg_weak",
        "numbers",
        "numbers_weak",
        "places",
        "stems",
        "surface",
        "terms",
    )

    def __init__(self) -> None:
        self.numbers: Counter[int] = Counter()
        self.numbers_weak: set[int] = set()
        self.names: set[str] = set()
        self.names_unknown: set[str] = set()
        self.neg = 0
        self.neg_weak = 0
        self.lists: set[int] = set()
        # English only: how many items each enumeration lists (after a colon or dash, comma/"and"-separated)
        self.listed: set[int] = set()
        self.terms: Counter[str] = Counter()
        self.folded = ""
        self.clauses: Parsed | None = None  # English only: clauses for the located peer comparisons
        # English only: (kind, item) -> character offsets of its mentions ("number", 4), ("name", key), ("term", key)
        self.places: dict[tuple[str, object], list[tuple[int, int]]] = {}
        # English only: (kind, item) -> the word as it stands on the page, first mention ("Raṭhapāla", not "rathapal")
        self.surface: dict[tuple[str, object], str] = {}
        # Pali only: folded stem -> the token it comes from (raṭṭhapāl -> raṭṭhapālo), for names the lexicon lacks
        self.stems: dict[str, str] = {}
        # Pali only: what the name checks derive from the source once (check.CriticalChecker._source_names)
        self.name_forms: tuple[str, dict[str, str], dict[str, str]] | None = None

    def where(self, kind: str, item: object) -> list[tuple[int, int]]:
        return self.places.get((kind, item), [])

    def _at(self, kind: str, item: object, start: int, end: int) -> None:
        self.places.setdefault((kind, item), []).append((start, end))


# an enumeration: what follows a colon, a dash or a question ("What four? Virtue, ...") up to the end of the
# sentence; its items split at commas, semicolons and a joining "and"/"or"
_ENUMERATION = re.compile(r"[:—–?]\s*([^.?!:—–]+)")
_ITEM_SPLIT = re.compile(r"[,;]|\s(?:and|or)\s")


def listed_counts(text: str) -> set[int]:
    """The number of items of each enumeration in ``text`` ("six classes: eye, ear, nose, tongue, body, and mind"
    lists six), so a list-size finding counts what the candidate lists, not only the number it names."""
    out = set()
    for m in _ENUMERATION.finditer(text):
        items = [p for p in _ITEM_SPLIT.split(m.group(1)) if p.strip()]
        if len(items) >= 2:
            out.add(len(items))
    return out


def number_word(v: int) -> str:
    """A reviewer-friendly English word for a number value."""
    words = {
        2: "two",
        3: "three",
        4: "four",
        5: "five",
        6: "six",
        7: "seven",
        8: "eight",
        9: "nine",
        10: "ten",
        11: "eleven",
        12: "twelve",
        20: "twenty",
        30: "thirty",
        40: "forty",
        50: "fifty",
        100: "hundred",
        1000: "thousand",
    }
    return words.get(v, str(v))


class Extractor:
    """Holds the lexicon's lookup tables; ``pali()`` and ``english()`` are pure and cheap (a pass over tokens)."""

    def __init__(self, lex: Lexicon) -> None:
        self.lex = lex
        # Longest prefix first so "satasahass" wins over "sata".
        self._pli_prefix = sorted(lex.pli_num_prefix.items(), key=lambda kv: -len(kv[0]))
        self._list_markers = {
            t: v for t, v in lex.pli_num_exact.items() if t.endswith(("me", "māni", "mā")) and t not in ("dasame",)
        }
        self._terms = PatternSet({k: t.pali for k, t in lex.glossary.terms.items()})
        self._rendering: dict[str, list[str]] = {}
        for key, term in lex.glossary.terms.items():
            for r in term.renderings:
                self._rendering.setdefault(r, []).append(key)
        # An untranslated Pali term in English (dukkha, jhāna, nibbāna) counts as rendering it.
        self._self_forms: dict[str, list[tuple[str, str]]] = {}
        for key, term in lex.glossary.terms.items():
            for pat in term.pali:
                f = fold(pat.rstrip("*"))
                if len(f) >= 5:
                    self._self_forms.setdefault(f[:3], []).append((f, key))
        self._en_num = lex.en_num_words
        self._en_weak = frozenset(lex.en_num_weak)
        num_alt = "|".join(sorted((w for w, v in self._en_num.items() if 2 <= v <= 12 and w.isalpha()), key=len))
        self._list_re = re.compile(
            rf"\b(?:these|those|the following|are|of the)\s+({num_alt})\b"
            rf"|\b({num_alt})\s+(?:\w+\s+)?(?:{_LIST_NOUNS})\b",
            re.IGNORECASE,
        )
        self._name_excl = {fold(w) for w in ("dhamma", "sangha", "buddha", "tathagata", "nibbana", "brahma", "deva")}

    @property
    def rendering(self) -> dict[str, list[str]]:
        """English rendering stem -> the glossary terms it renders."""
        return self._rendering

    def pali(self, text: str) -> Content:
        c = Content()
        toks = pali_tokens(text)
        c.folded = " ".join(fold(t) for t in toks)
        for t in toks:
            c.stems.setdefault(fold(pali_stem(t, 3)), t)
        exact, weak, forms = self.lex.pli_num_exact, self.lex.pli_num_weak, self.lex.names.pali_forms
        for i, t in enumerate(toks):
            v = exact.get(t)
            if v is None and t.endswith("pi") and len(t) > 4:
                # the enclitic -pi ("even", "also"): catassopi jātiyo, vīsampi (ṃ + pi -> mpi)
                base = t[:-2]
                v = exact.get(base[:-1] + "ṃ" if base.endswith("m") else base)
            if v is None:
                for p, pv in self._pli_prefix:
                    if t.startswith(p):
                        v = pv
                        break
            if v is not None:
                c.numbers[v] += 1
                nxt = toks[i + 1] if i + 1 < len(toks) else ""
                if t in self._list_markers or nxt in ("ime", "imāni", "imā", "ime"):
                    c.lists.add(v)
            elif t in weak:
                c.numbers_weak.add(weak[t])
            for sub, vals in self.lex.pli_num_weak_contains.items():
                if sub in t:
                    c.numbers_weak.update(vals)
            if t in PALI_NEG:
                c.neg += 1
            elif t in PALI_NEG_WEAK:
                c.neg_weak += 1
            k = forms.get(t)
            if k is not None:
                c.names.add(k)
            for term in self._terms.match(t):
                c.terms[term] += 1
        return c

    def english(self, text: str) -> Content:
        c = Content()
        c.clauses = parse(text)
        c.folded = " ".join(fold(t.text) for t in word_tokens(text))
        nfc = unicodedata.normalize("NFC", text)  # the marks' offsets are in the NFC text
        c.listed = listed_counts(nfc)
        # the counts and their places (a finding's spans) come from the one walk of ``english_marks``
        for kind, value, start, end in self.english_marks(text):
            if kind == "number":
                c.numbers[int(value)] += 1
                c._at("number", int(value), start, end)
            elif kind == "number_weak":
                c.numbers_weak.add(int(value))
            elif kind == "negator":
                c.neg += 1
            elif kind == "name":
                c.names.add(str(value))
                c._at("name", str(value), start, end)
                c.surface.setdefault(("name", str(value)), nfc[start:end])
            elif kind == "name_unknown":
                c.names_unknown.add(str(value))
                c._at("name", str(value), start, end)
                c.surface.setdefault(("name", str(value)), nfc[start:end])
            elif kind == "term":
                c.terms[str(value)] += 1
                c._at("term", str(value), start, end)
            else:  # "list"
                c.lists.add(int(value))
                c._at("list", int(value), start, end)
        return c

    def english_marks(self, text: str) -> Iterator[Mark]:
        """Everything ``english`` counts, where it stands: (kind, value, start, end) per number (strong or weak),
        negator, name (known or Pali-looking), glossary term and list size. The one pass behind the counts and
        behind the highlights of a finding on the candidate's text."""
        toks = word_tokens(text)
        names = self.lex.names.names
        for t in toks:
            f = fold(t.text)
            low = t.lower
            end = t.start + len(t.text)
            v = self._en_num.get(low)
            if v is not None:
                yield ("number_weak" if low in self._en_weak else "number", v, t.start, end)
            if low in EN_NEG:
                yield ("negator", low, t.start, end)
            if t.capital:
                k = names.get(f)
                if k is not None:
                    yield ("name", k, t.start, end)
                elif not t.sentence_start and len(f) >= 4 and any(ch in _PALI_DIACRITICS for ch in low):
                    # Unknown Pali-looking names: plural/possessive "s" and the final vowel off, like the lexicon keys.
                    base = f[:-1] if f.endswith("s") and len(f) > 4 else f
                    if base not in self._name_excl:
                        yield ("name_unknown", base[:-1] if base[-1] in "aeiou" else base, t.start, end)
            for term in self._rendering.get(en_stem(low), ()):
                yield ("term", term, t.start, end)
            if len(f) >= 5:
                for sf, key in self._self_forms.get(f[:3], ()):
                    if f.startswith(sf):
                        yield ("term", key, t.start, end)
        # word_tokens normalises to NFC: positions below are in the NFC text too
        text = unicodedata.normalize("NFC", text)
        for m in _EN_NT.finditer(text):
            yield ("negator", "not", m.start(), m.end())
        for m in _DIGITS.finditer(text):
            d = int(m.group(1))
            if d >= 2:
                yield ("number", d, m.start(1), m.end(1))
        for m in self._list_re.finditer(text):
            w = (m.group(1) or m.group(2)).lower()
            yield ("list", self._en_num[w], m.start(), m.end())
