"""Word- and clause-level features of a candidate against its Pali source, read through the translation lexicon.

The alignment at inference is the lexicon's: a target word is linked to the source stem that renders it with the
highest p(English | Pali) (and, the other way, p(Pali | English)); a source clause is rendered when the candidate
says one of its stems' renderings. The same code reads the synthetic training pairs and the service's candidates,
so a feature means the same thing at training and at run time.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from service.core.critical.renderings import (
    EN_NEGATORS,
    TranslationLexicon,
    content_word,
    negative_word,
)
from service.core.critical.tokens import en_stem, pali_stem, pali_tokens, word_tokens

__all__ = [
    "CLAUSE_FEATURES",
    "WORD_FEATURES",
    "CandidateView",
    "SourceView",
    "candidate_view",
    "clause_features",
    "source_clauses",
    "source_view",
    "word_features",
]

# A Pali clause ends at sentence or clause punctuation (the bilara texts punctuate the Pali too).
_CLAUSE_END = re.compile(r"[.?!;:,\u2014]+")
_SENT_END = re.compile(r"[.?!;:]")
_NUMBER_WORDS = frozenset(
    """one two three four five six seven eight nine ten eleven twelve twenty thirty hundred thousand first second
    third fourth fifth sixth seventh eighth ninth tenth""".split()
)
RENDERED_P = 0.05  # a rendering below this p(English | Pali) does not count as rendering the stem
STRONG_P = 0.4  # a stem with a rendering this likely is one a translation is expected to render

WORD_FEATURES: tuple[str, ...] = (
    "p_render",  # max p(word | source stem) over the source's stems: the lexicon links the word to the source
    "p_source",  # max p(source stem | word): the word is the usual rendering of something the source says
    "unlinked",  # neither direction links the word to the source
    "known",  # the lexicon knows the word at all (renders some Pali stem)
    "origin_p",  # p of the Pali word the word usually renders (its term origin)
    "origin_absent",  # that Pali word is not in the source: the lexicon expects another rendering here
    "origin_freq",  # log training frequency of that Pali word (a doctrinal term is frequent)
    "sent_linked",  # share of the other content words of the word's sentence that the source links
    "neigh_linked",  # mean link of the content words before and after
    "negator",  # the word says "not" by itself
    "neg_excess",  # candidate's negative words minus the source's negators (a passage count), when a negator
    "number",  # a number word
    "name",  # a capital word that does not open a sentence
    "unrendered",  # share of the source's content stems the candidate renders nowhere (something else said?)
    "expect_other",  # unlinked word while source stems go unrendered: a rendering swapped for another word
    "repeat",  # log count of the word in the candidate
    "excess",  # log of its count against the count the source's stems lead one to expect (a swap says one too often)
    "strong_missing",  # log count of source stems whose usual rendering (p >= 0.4) the candidate never says
    "position",  # where in the candidate (0..1)
)
CLAUSE_FEATURES: tuple[str, ...] = (
    "stems",  # log number of content stems of the clause
    "rendered",  # share of the clause's known stems whose rendering the candidate says
    "rendered_weighted",  # the same weighted by the stems' rarity in the source (a stem said once counts more)
    "unique",  # share of the clause's stems that no other clause has
    "unique_rendered",  # share of those unique stems the candidate renders
    "known",  # share of the clause's stems the lexicon knows
    "first",
    "last",
    "length_ratio",  # candidate characters / source characters (a passage figure)
    "passage_rendered",  # share of the whole source's known stems rendered
)


@dataclass(frozen=True)
class SourceView:
    """The source as the detector reads it: stems, their clauses, and the renderings the lexicon expects."""

    stems: frozenset[str]
    prefixes: frozenset[str]  # first four letters of every stem (a compound family, as term_origin groups them)
    clauses: tuple[tuple[str, ...], ...]  # content stems per clause
    clause_spans: tuple[tuple[int, int], ...]  # character offsets of each clause in the source
    render_max: dict[str, float]  # English stem -> max p(English | stem) over the source's stems
    expected: dict[str, float]  # English stem -> sum over the source's tokens of p(English | their stem)
    strong: dict[str, frozenset[str]]  # source stem -> its renderings, for stems with one of p >= STRONG_P
    renders: dict[str, frozenset[str]]  # source stem -> its renderings (p >= RENDERED_P)
    negators: int
    chars: int


@dataclass(frozen=True)
class CandidateView:
    """A candidate's tokens with their stems and sentence numbers."""

    starts: tuple[int, ...]
    ends: tuple[int, ...]
    stems: tuple[str, ...]
    content: tuple[bool, ...]
    sentence: tuple[int, ...]
    capital: tuple[bool, ...]
    chars: int


def source_clauses(source: str) -> list[tuple[int, int]]:
    """Character spans of the source's clauses (split at sentence and clause punctuation)."""
    spans, at = [], 0
    for m in _CLAUSE_END.finditer(source):
        if source[at : m.start()].strip():
            spans.append((at, m.end()))
        at = m.end()
    if source[at:].strip():
        spans.append((at, len(source)))
    return spans


def source_view(source: str, lexicon: TranslationLexicon) -> SourceView:
    spans = source_clauses(source)
    clauses = []
    all_stems: set[str] = set()
    negators = 0
    for a, b in spans:
        toks = pali_tokens(source[a:b])
        negators += sum(lexicon.is_negator(t) for t in toks)
        stems = tuple(s for s in (pali_stem(t) for t in toks) if len(s) >= 3)
        clauses.append(stems)
        all_stems.update(stems)
    render_max: dict[str, float] = {}
    expected: dict[str, float] = {}
    renders: dict[str, frozenset[str]] = {}
    strong: dict[str, frozenset[str]] = {}
    occurrences: dict[str, int] = {}
    for c in clauses:
        for f in c:
            occurrences[f] = occurrences.get(f, 0) + 1
    for f in all_stems:
        row = lexicon.render.get(f)
        if not row:
            continue
        renders[f] = frozenset(e for e, p in row.items() if p >= RENDERED_P)
        if max(row.values()) >= STRONG_P:
            strong[f] = renders[f]
        for e, p in row.items():
            if p > render_max.get(e, 0.0):
                render_max[e] = p
            expected[e] = expected.get(e, 0.0) + p * occurrences[f]
    return SourceView(
        stems=frozenset(all_stems),
        prefixes=frozenset(s[:4] for s in all_stems),
        clauses=tuple(clauses),
        clause_spans=tuple(spans),
        render_max=render_max,
        expected=expected,
        strong=strong,
        renders=renders,
        negators=negators,
        chars=len(source),
    )


def candidate_view(text: str) -> CandidateView:
    toks = word_tokens(text)
    sentence, k = [], 0
    prev_end = 0
    for t in toks:
        if _SENT_END.search(text[prev_end : t.start]):
            k += 1
        sentence.append(k)
        prev_end = t.start + len(t.text)
    stems = tuple(en_stem(t.lower) for t in toks)
    return CandidateView(
        starts=tuple(t.start for t in toks),
        ends=tuple(t.start + len(t.text) for t in toks),
        stems=stems,
        content=tuple(content_word(s) for s in stems),
        sentence=tuple(sentence),
        capital=tuple(t.capital and not t.sentence_start for t in toks),
        chars=len(text),
    )


def _clip3(x: float) -> float:
    """x within [-3, 3] (np.clip costs microseconds a call on a scalar, and this runs per word)."""
    return -3.0 if x < -3.0 else 3.0 if x > 3.0 else x


@lru_cache(maxsize=1 << 15)
def _log1p(n: int) -> float:
    return math.log1p(n)


def word_features(src: SourceView, cand: CandidateView, lexicon: TranslationLexicon) -> np.ndarray:
    """One row of WORD_FEATURES per candidate token (rows of function words are computed too; the model skips
    them)."""
    n = len(cand.stems)
    out = np.zeros((n, len(WORD_FEATURES)), dtype=np.float64)
    if n == 0:
        return out
    said = set(cand.stems)
    known_src = [f for f in src.renders if src.renders[f]]
    unrendered = sum(1 for f in known_src if not (src.renders[f] & said)) / max(1, len(known_src))
    neg_words = sum(1 for s in cand.stems if negative_word(s))
    neg_excess = _clip3(float(neg_words - src.negators))
    strong_missing = math.log1p(sum(1 for r in src.strong.values() if not (r & said))) / 3.0
    counts: dict[str, int] = {}
    for s in cand.stems:
        counts[s] = counts.get(s, 0) + 1
    link = np.zeros(n)
    p_render = np.zeros(n)
    p_source = np.zeros(n)
    for i, e in enumerate(cand.stems):
        p_render[i] = src.render_max.get(e, 0.0)
        row = lexicon.source_of.get(e)
        if row:
            p_source[i] = max((p for f, p in row.items() if f in src.stems), default=0.0)
        link[i] = max(p_render[i], p_source[i]) > 0.0
    content_idx = [i for i in range(n) if cand.content[i]]
    # per sentence: linked content words and content words
    sent_linked: dict[int, float] = {}
    sent_n: dict[int, int] = {}
    for i in content_idx:
        sent_linked[cand.sentence[i]] = sent_linked.get(cand.sentence[i], 0.0) + link[i]
        sent_n[cand.sentence[i]] = sent_n.get(cand.sentence[i], 0) + 1
    pos_in_content = {i: k for k, i in enumerate(content_idx)}
    for i, e in enumerate(cand.stems):
        if not cand.content[i]:
            continue
        origin, origin_p, origin_n = lexicon.term_origin(e)
        sent = cand.sentence[i]
        others = sent_n[sent] - 1
        k = pos_in_content[i]
        neigh = [link[content_idx[j]] for j in (k - 1, k + 1) if 0 <= j < len(content_idx)]
        is_neg = e in EN_NEGATORS
        unlinked = float(not link[i])
        origin_absent = float(bool(origin) and origin[:4] not in src.prefixes)
        out[i] = (
            p_render[i],
            p_source[i],
            unlinked,
            float(e in lexicon.source_of),
            origin_p,
            origin_absent,
            _log1p(origin_n) / 10.0,
            (sent_linked[sent] - link[i]) / others if others > 0 else 0.5,
            sum(neigh) / len(neigh) if neigh else 0.5,
            float(is_neg),
            float(is_neg) * neg_excess,
            float(e in _NUMBER_WORDS),
            float(cand.capital[i]),
            unrendered,
            unlinked * unrendered,
            _log1p(counts[e]),
            _clip3(math.log((counts[e] + 0.5) / (src.expected.get(e, 0.0) + 0.5))),
            strong_missing,
            i / max(1, n - 1),
        )
    return out


def clause_features(src: SourceView, cand: CandidateView) -> np.ndarray:
    """One row of CLAUSE_FEATURES per source clause."""
    n = len(src.clauses)
    out = np.zeros((n, len(CLAUSE_FEATURES)), dtype=np.float64)
    said = set(cand.stems)
    in_clauses: dict[str, int] = {}
    for c in src.clauses:
        for f in set(c):
            in_clauses[f] = in_clauses.get(f, 0) + 1
    rendered = {f: bool(r & said) for f, r in src.renders.items() if r}
    passage_rendered = sum(rendered.values()) / max(1, len(rendered))
    ratio = cand.chars / max(1, src.chars)
    for k, stems in enumerate(src.clauses):
        uniq_stems = set(stems)
        known = [f for f in uniq_stems if f in rendered]
        unique = [f for f in known if in_clauses[f] == 1]
        weight = sum(1.0 / in_clauses[f] for f in known)
        out[k] = (
            _log1p(len(uniq_stems)) / 3.0,
            sum(rendered[f] for f in known) / len(known) if known else 1.0,
            sum(rendered[f] / in_clauses[f] for f in known) / weight if weight else 1.0,
            len(unique) / max(1, len(uniq_stems)),
            sum(rendered[f] for f in unique) / len(unique) if unique else 1.0,
            len(known) / max(1, len(uniq_stems)),
            float(k == 0),
            float(k == n - 1),
            min(ratio, 3.0),
            passage_rendered,
        )
    return out
