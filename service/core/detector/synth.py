"""Synthetic training data for the error detector: good segment-aligned translations corrupted in known ways.

A *chunk* is two to eight consecutive bilara segments of one text and translator (about a PaliBench passage). Each
chunk is kept clean once and corrupted once per draw, with the error types reviewers care about, each in several
ways: a term replaced by another term of the teaching (one absent from the source, or one the source says elsewhere),
by its opposite, or by the rendering of an unlicensed Pali stem; a segment dropped at the start, middle or end; a
negation added or removed; a number or name changed; a segment of a neighbouring chunk added at the start, middle
or end. Every pair carries the character spans of the wrong target words, the character spans of the source clauses
whose translation is missing, and a passage label. Seeded; ``SYNTH_VERSION`` changes when a rule does.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from service.core.critical.build_glossary import Segment
from service.core.critical.renderings import TranslationLexicon, content_word
from service.core.critical.tokens import en_stem, pali_stem, pali_tokens, word_tokens
from service.core.detector.features import source_clauses

__all__ = ["SYNTH_VERSION", "VARIANTS", "Chunk", "Pair", "chunks", "corrupt", "synthesize"]

SYNTH_VERSION = "detector-synth-1"

VARIANTS: dict[str, tuple[str, ...]] = {
    "term": ("related", "in_source", "opposite", "unlicensed", "related_every"),
    "omission": ("first", "middle", "last"),
    "negation": ("added", "removed"),
    "number": ("one",),
    "name": ("one",),
    "addition": ("first", "middle", "last"),
}
_NUMBERS = [
    ["two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"],
    ["second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"],
    ["hundred", "thousand"],
]
_NUMBER_RE = re.compile(r"\b(" + "|".join(w for g in _NUMBERS for w in g) + r")\b", re.IGNORECASE)
_AUX = re.compile(r"\b(is|are|was|were|can|will|should|would|does|do|did|has|have|had|could|may|must)\b ")
_NEG = re.compile(r"\b(not|never)\b ?", re.IGNORECASE)
_NEG_PREFIXES = ("un", "in", "im", "dis")
_FREQUENT = 200  # a Pali stem seen this often in training is a term of the teaching, for a related-term swap


@dataclass(frozen=True)
class Chunk:
    """Consecutive segments of one text: per segment the Pali and the English."""

    text_id: str
    pli: tuple[str, ...]
    en: tuple[str, ...]


@dataclass
class Pair:
    """One training pair: source, target, wrong target words and missing source clauses (character spans)."""

    text_id: str
    source: str
    target: str
    error_type: str  # "clean" or a key of VARIANTS
    variant: str
    bad_words: list[tuple[int, int]] = field(default_factory=list)
    missing: list[tuple[int, int]] = field(default_factory=list)

    @property
    def label(self) -> bool:
        return self.error_type != "clean"


def chunks(segments: Iterable[Segment], rng: random.Random, lo: int = 2, hi: int = 8) -> list[Chunk]:
    """Consecutive segments of each (translator, text) cut into chunks of ``lo``..``hi`` segments."""
    out: list[Chunk] = []
    run: list[Segment] = []

    def flush() -> None:
        at = 0
        while len(run) - at >= lo:
            n = rng.randint(lo, hi)
            part = run[at : at + n]
            out.append(Chunk(part[0].text_id, tuple(s.pli.strip() for s in part), tuple(s.en.strip() for s in part)))
            at += n

    for seg in segments:
        if run and (seg.text_id != run[0].text_id or seg.translator != run[0].translator):
            flush()
            run = []
        run.append(seg)
    flush()
    return out


def _join(parts: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """Parts joined by spaces, and each part's character span."""
    spans, at = [], 0
    for p in parts:
        spans.append((at, at + len(p)))
        at += len(p) + 1
    return " ".join(parts), spans


class _Terms:
    """Replacement words the lexicon offers: renderings of frequent stems, of any stem, and opposites."""

    def __init__(self, lexicon: TranslationLexicon) -> None:
        self.lexicon = lexicon
        top = {f: max(r.items(), key=lambda kv: (kv[1], kv[0]))[0] for f, r in lexicon.render.items() if r}
        self.top = {f: e for f, e in top.items() if content_word(e) and e.isalpha() and len(e) >= 4}
        self.frequent = sorted(f for f in self.top if lexicon.count.get(f, 0) >= _FREQUENT)
        self.any = sorted(self.top)
        self.english = frozenset(lexicon.source_of)

    def opposite(self, e: str) -> str | None:
        """An English opposite the lexicon knows: the negative prefix taken off or put on."""
        for p in _NEG_PREFIXES:
            if e.startswith(p) and e[len(p) :] in self.english:
                return e[len(p) :]
        for p in _NEG_PREFIXES:
            if p + e in self.english:
                return p + e
        return None


def _case_like(new: str, old: str) -> str:
    return new.capitalize() if old[:1].isupper() else new


def _replace_words(text: str, hits: list[tuple[int, int]], new: str) -> tuple[str, list[tuple[int, int]]]:
    out, spans, at, shift = [], [], 0, 0
    for a, b in sorted(hits):
        word = _case_like(new, text[a:b])
        out += [text[at:a], word]
        spans.append((a + shift, a + shift + len(word)))
        shift += len(word) - (b - a)
        at = b
    return "".join([*out, text[at:]]), spans


def _term(chunk: Chunk, pair: Pair, variant: str, rng: random.Random, terms: _Terms) -> bool:
    src_stems = {pali_stem(t) for t in pali_tokens(pair.source)}
    prefixes = {s[:4] for s in src_stems}
    toks = word_tokens(pair.target)
    linked = []
    for t in toks:
        e = en_stem(t.lower)
        if e == t.lower and content_word(e) and len(e) >= 4:  # a word whose stem is itself (no plural to keep)
            p = max((terms.lexicon.render.get(f, {}).get(e, 0.0) for f in src_stems), default=0.0)
            if p >= 0.2:
                linked.append(t)
    if not linked:
        return False
    tok = rng.choice(linked)
    old = tok.lower
    new: str | None = None
    if variant in ("related", "related_every"):
        pool = [f for f in rng.sample(terms.frequent, min(40, len(terms.frequent))) if f[:4] not in prefixes]
        new = next((terms.top[f] for f in pool if terms.top[f] != old), None)
    elif variant == "in_source":
        pool = [f for f in src_stems if f in terms.top and terms.top[f] != old and terms.top[f] not in pair.target]
        new = terms.top[rng.choice(sorted(pool))] if pool else None
    elif variant == "opposite":
        new = terms.opposite(old)
    elif variant == "unlicensed":
        pool = [f for f in rng.sample(terms.any, min(40, len(terms.any))) if f[:4] not in prefixes]
        new = next((terms.top[f] for f in pool if terms.top[f] != old), None)
    if not new or new == old:
        return False
    hits = [(t.start, t.start + len(t.text)) for t in toks if t.lower == old] if variant.endswith("every") else []
    pair.target, pair.bad_words = _replace_words(pair.target, hits or [(tok.start, tok.start + len(tok.text))], new)
    return True


def _omission(chunk: Chunk, pair: Pair, variant: str, rng: random.Random, terms: _Terms) -> bool:
    n = len(chunk.en)
    if n < 3 or (variant == "middle" and n < 3):
        return False
    i = 0 if variant == "first" else n - 1 if variant == "last" else rng.randrange(1, n - 1)
    if len(word_tokens(chunk.en[i])) < 2:
        return False
    pair.target, _ = _join(chunk.en[:i] + chunk.en[i + 1 :])
    _, pli_spans = _join(chunk.pli)
    a, b = pli_spans[i]
    pair.missing = [(x, y) for x, y in source_clauses(pair.source) if x < b and y > a]
    return bool(pair.missing)


def _negation(chunk: Chunk, pair: Pair, variant: str, rng: random.Random, terms: _Terms) -> bool:
    text = pair.target
    if variant == "added":
        hits = list(_AUX.finditer(text))
        if not hits:
            return False
        m = rng.choice(hits)
        pair.target = text[: m.end()] + "not " + text[m.end() :]
        pair.bad_words = [(m.end(), m.end() + 3)]
        return True
    hits = list(_NEG.finditer(text))
    if not hits:
        return False
    m = rng.choice(hits)
    pair.target = text[: m.start()] + text[m.end() :]
    nxt = next((t for t in word_tokens(pair.target) if t.start >= m.start()), None)
    if nxt is None:
        return False
    pair.bad_words = [(nxt.start, nxt.start + len(nxt.text))]  # the word the negation belonged to now says yes
    return True


def _number(chunk: Chunk, pair: Pair, variant: str, rng: random.Random, terms: _Terms) -> bool:
    hits = list(_NUMBER_RE.finditer(pair.target))
    if not hits:
        return False
    m = rng.choice(hits)
    group = next(g for g in _NUMBERS if m.group(1).lower() in g)
    new = rng.choice([w for w in group if w != m.group(1).lower()])
    pair.target, pair.bad_words = _replace_words(pair.target, [(m.start(), m.end())], new)
    return True


def _name(chunk: Chunk, pair: Pair, variant: str, rng: random.Random, names: Sequence[str]) -> bool:
    toks = [t for t in word_tokens(pair.target) if t.capital and not t.sentence_start and len(t.text) >= 4]
    if not toks or not names:
        return False
    tok = rng.choice(toks)
    new = rng.choice(names)
    if new.lower() == tok.lower:
        return False
    pair.target, pair.bad_words = _replace_words(pair.target, [(tok.start, tok.start + len(tok.text))], new)
    return True


def _addition(chunk: Chunk, pair: Pair, variant: str, rng: random.Random, extra: str) -> bool:
    n = len(chunk.en)
    if variant == "middle" and n < 2:
        return False
    i = 0 if variant == "first" else n if variant == "last" else rng.randrange(1, n)
    parts = [*chunk.en[:i], extra, *chunk.en[i:]]
    pair.target, spans = _join(parts)
    a = spans[i][0]
    pair.bad_words = [(t.start + a, t.start + a + len(t.text)) for t in word_tokens(extra)]
    return bool(pair.bad_words)


_Rule = Callable[[Chunk, Pair, str, random.Random, _Terms], bool]
_RULES: dict[str, _Rule] = {"term": _term, "omission": _omission, "negation": _negation, "number": _number}


def corrupt(
    chunk: Chunk, etype: str, variant: str, rng: random.Random, terms: _Terms, names: Sequence[str], extra: str
) -> Pair | None:
    """One corrupted copy of ``chunk`` (None when the rule has nothing to act on)."""
    source, _ = _join(chunk.pli)
    target, _ = _join(chunk.en)
    pair = Pair(chunk.text_id, source, target, etype, variant)
    if etype == "name":
        ok = _name(chunk, pair, variant, rng, names)
    elif etype == "addition":
        ok = _addition(chunk, pair, variant, rng, extra)
    else:
        ok = _RULES[etype](chunk, pair, variant, rng, terms)
    return pair if ok and pair.target != target else None


def _names(chunks_: Sequence[Chunk]) -> list[str]:
    """Capital words inside sentences across the chunks, seen at least five times (names, mostly)."""
    counts: dict[str, int] = {}
    for c in chunks_:
        for en in c.en:
            for t in word_tokens(en):
                if t.capital and not t.sentence_start and len(t.text) >= 4:
                    counts[t.text] = counts.get(t.text, 0) + 1
    return sorted(w for w, n in counts.items() if n >= 5)


def synthesize(chunks_: Sequence[Chunk], lexicon: TranslationLexicon, seed: int, draws: int = 2) -> list[Pair]:
    """Every chunk clean once, and ``draws`` corrupted copies of it (type and variant drawn at random)."""
    rng = random.Random(seed)
    terms = _Terms(lexicon)
    names = _names(chunks_)
    kinds = [(t, v) for t, vs in VARIANTS.items() for v in vs]
    # term swaps and omissions are what the counts miss: they get twice the draws
    weights = [2.0 if t in ("term", "omission") else 1.0 for t, _ in kinds]
    out: list[Pair] = []
    for k, chunk in enumerate(chunks_):
        source, _ = _join(chunk.pli)
        target, _ = _join(chunk.en)
        out.append(Pair(chunk.text_id, source, target, "clean", ""))
        for _ in range(draws):
            for _attempt in range(4):
                etype, variant = rng.choices(kinds, weights)[0]
                neighbour = chunks_[(k + rng.randint(1, 50)) % len(chunks_)]
                pair = corrupt(chunk, etype, variant, rng, terms, names, rng.choice(neighbour.en))
                if pair is not None:
                    out.append(pair)
                    break
    return out
