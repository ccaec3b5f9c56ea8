"""Source coverage through the translation lexicon: which Pali content a candidate renders, compared with its peers.

The lexicon says which English words render each source stem. Every candidate of a passage is read against the
same source, so the peers' consensus tells what a faithful rendering of *this* passage looks like, and the
candidate is compared with that, not with a fixed rule:

- **omission**: source stems most peers render that the candidate renders nowhere (or fewer times than they do);
- **addition**: candidate sentences whose content no source stem licenses and no peer shares;
- **substitution**: a source stem the candidate renders fewer times than the peers, with a word in its place that
  renders another Pali stem, one absent from the source ("happiness", a rendering of sukha, where the source says
  dukkha and the peers "suffering");
- **negation**: a negator the peers put between two words the candidate says one after the other (the word before
  or after agreeing too), or one the candidate puts where the peers go straight on (counting negators per aligned
  source clause caught nothing at a low false-flag rate: clause alignment is too loose for one word).

Each finding carries character offsets in the candidate and reviewer wording.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Container, Sequence
from functools import lru_cache

import numpy as np

from service.core.critical.renderings import EN_NEGATORS, TranslationLexicon, content_word
from service.core.critical.tokens import en_stem, pali_stem, pali_tokens
from service.core.types import SignalResult, SignalSkipped, SignalValue

__all__ = ["COVERAGE_SIGNALS", "PassageCoverage", "SourceView", "TextView"]

COVERAGE_SIGNALS = (
    "source_omission",
    "unlicensed_content",
    "term_substitution",
    "negation_context",
    "phrase_omission",
    "source_tail_omission",
)
NEEDS_PEERS = "needs at least two peer translations of the same passage"
NEEDS_PEER = "needs a peer translation of the same passage"

_WORD = re.compile(r"[^\W\d_]+", re.UNICODE)
_NT = re.compile(r"n['’]t\b", re.IGNORECASE)
# clause ends in both languages: sentence and clause punctuation, dashes
_CLAUSE_END = re.compile(r"[.;:?!,\u2014\u2013]+[\"”’']?(?=\s|$)|\u2014")
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”’']?\s+")

RENDER_MIN = 0.05  # a rendering at least this likely counts as the source stem rendered
CONTENT_MIN = 0.15  # a source stem whose best rendering is at least this likely is content (not a particle)
LICENSE_MIN = 0.03  # any lexicon link at all licenses an English word
SOURCE_OF_MIN = 0.2  # an English word is "a rendering of" a Pali stem at this p(stem | word)
TERM_COUNT_MIN = 150  # training occurrences that make a Pali stem a term (about the 3% most frequent stems)
MAJORITY = 0.7  # share of peers that makes a rendering (or a shared phrase) the consensus
# added to the peers' phrase counts that phrase_omission divides by: few shared phrases say little
PHRASE_FLOOR = 8.0
# omission blends what the source alone expects with what the peers render, the peers weighing n / PEERS_FULL of it
# (so one peer a quarter, four or more all): a rule by peer count, not a cliff where peers start to count
PEERS_FULL = 4
# the last part of the source's content (by position) whose renderings a truncated candidate lacks
TAIL_SHARE = 0.25
_PREFIX = 5


class SourceView:
    """The source passage read through the lexicon: its content stems, their renderings, its clauses' negators."""

    def __init__(self, text: str, lex: TranslationLexicon) -> None:
        self.lex = lex
        self.clauses: list[tuple[list[str], int, str]] = []  # (stems, negators, text)
        self.display: dict[str, str] = {}
        stems: Counter[str] = Counter()
        for piece in _split(text):
            toks = pali_tokens(piece)
            st = [pali_stem(t) for t in toks]
            for t, s in zip(toks, st, strict=True):
                self.display.setdefault(s, t)
            self.clauses.append((st, sum(1 for t in toks if lex.is_negator(t)), piece.strip()))
            stems.update(st)
        self.stems = stems
        self.render: dict[str, dict[str, float]] = {}
        for s in stems:
            r = lex.render.get(s)
            if r and max(r.values()) >= CONTENT_MIN:
                # a rendering both ways (the stem is among the word's sources too), or a dominant one: a word that
                # merely travels with the stem (cattāro ... "mendicants") is not its rendering
                self.render[s] = {
                    e: p
                    for e, p in r.items()
                    if e not in EN_NEGATORS and (p >= 0.3 or (p >= RENDER_MIN and s in lex.source_of.get(e, ())))
                }
        # English words some source stem licenses (any link, either direction)
        self.licensed: set[str] = {e for s in stems for e in lex.render.get(s, ())}
        self.stem_set = frozenset(stems)
        # stems are crude (bhikkhave -> bhikkhav, bhikkhu -> bhikkh): five letters decide "the same word"
        self.prefixes = frozenset(s[:_PREFIX] for s in stems if len(s) >= 3)
        # the source stems each English word renders
        self.rendered_by: dict[str, list[str]] = {}
        for s, r in self.render.items():
            for e in r:
                self.rendered_by.setdefault(e, []).append(s)
        # source clause index per rendering word, for the clause alignment
        self.clause_of: dict[str, set[int]] = {}
        for i, (st, _, _) in enumerate(self.clauses):
            for s in st:
                for e in self.render.get(s, ()):
                    self.clause_of.setdefault(e, set()).add(i)

    def reliability(self, stems: Sequence[str]) -> np.ndarray:
        """How reliably each stem is rendered by one of its renderings (their probabilities summed, at most 1)."""
        return np.array([min(1.0, sum(self.render.get(s, {}).values())) for s in stems], dtype=float)

    def licenses(self, e: str) -> bool:
        if e in self.licensed:
            return True
        back = self.lex.source_of.get(e) or {}
        return any(self.has(s) for s in back)

    def has_part(self, stem: str) -> bool:
        """Whether a source word contains this stem, or it contains a source stem (Pali compounds: sīsābādha holds
        ābādha)."""
        return self.has(stem) or any(stem in s or (len(s) >= _PREFIX and s in stem) for s in self.stem_set)

    def has(self, stem: str) -> bool:
        """Whether the source has this Pali stem (or one with its first five letters)."""
        return stem in self.stem_set or stem[:_PREFIX] in self.prefixes


@lru_cache(maxsize=256)
def _source_view(lex: TranslationLexicon, text: str) -> SourceView:
    """A source read once while its candidates come in (a passage's translations arrive in several requests and
    rounds; the view is only read after it is built)."""
    return SourceView(text, lex)


def _split(text: str) -> list[str]:
    out, at = [], 0
    for m in _CLAUSE_END.finditer(text):
        out.append(text[at : m.end()])
        at = m.end()
    if text[at:].strip():
        out.append(text[at:])
    return [p for p in out if p.strip()]


@lru_cache(maxsize=1 << 16)
def _content(stem: str) -> bool:
    """A content word that is not a negator (negators are counted apart)."""
    return content_word(stem) and stem not in EN_NEGATORS


class TextView:
    """An English text as stems with offsets, grouped in clauses and sentences."""

    def __init__(self, text: str, lex: TranslationLexicon) -> None:
        self.text = text
        nt_at = {m.start() + 2 for m in _NT.finditer(text)}
        words = list(_WORD.finditer(text))
        self.spans: list[tuple[int, int]] = [m.span() for m in words]
        lows = [m.group(0).lower() for m in words]
        if nt_at:  # "don't": "do" and "not" (rare, so the common case has no per-token test)
            for k, m in enumerate(words):
                if m.start() in nt_at and lows[k] == "t":
                    lows[k] = "not"
                elif m.end() + 1 in nt_at and lows[k].endswith("n"):
                    lows[k] = lows[k][:-1]
        self.stems: list[str] = [en_stem(low) for low in lows]
        self.content = [_content(s) for s in self.stems]
        self.counts: Counter[str] = Counter(s for s, c in zip(self.stems, self.content, strict=True) if c)
        self.size = sum(self.counts.values())
        self.clauses = _groups(text, self.spans, _CLAUSE_END, after=True)
        self.sentences = _groups(text, self.spans, _SENTENCE_END, after=False)
        self.at: dict[str, list[int]] = {}  # stem -> its token indices
        for t, st in enumerate(self.stems):
            self.at.setdefault(st, []).append(t)

    def span_of(self, tokens: range) -> tuple[int, int]:
        return (self.spans[tokens.start][0], self.spans[tokens.stop - 1][1])

    def after(self, tokens: range) -> int:
        """The offset just after these tokens and the punctuation that closes them (where a clause would follow)."""
        end = self.spans[tokens.stop - 1][1]
        while end < len(self.text) and not self.text[end].isspace() and not self.text[end].isalnum():
            end += 1
        return end


def _groups(text: str, spans: list[tuple[int, int]], pattern: re.Pattern[str], *, after: bool) -> list[range]:
    """Token index ranges of the clauses (or sentences) of ``text``, empty ones dropped."""
    cuts = [m.end() if after else m.start() for m in pattern.finditer(text)]
    out: list[range] = []
    k = start = 0
    for cut in [*cuts, len(text) + 1]:
        while k < len(spans) and spans[k][0] < cut:
            k += 1
        if k > start:
            out.append(range(start, k))
            start = k
    return out


class _Counts:
    """How often a text renders each source stem (tokens whose stem is among its renderings)."""

    def __init__(self, src: SourceView, view: TextView) -> None:
        self.hits = {s: sum(view.counts.get(e, 0) for e in r) for s, r in src.render.items()}


class PassageCoverage:
    """The four coverage signals of every candidate of a passage, each against the others as peers."""

    def __init__(self, lex: TranslationLexicon, source: str, candidates: Sequence[str]) -> None:
        self.lex = lex
        self.src = _source_view(lex, source)
        self.views = [TextView(c, lex) for c in candidates]
        self.counts = [_Counts(self.src, v) for v in self.views]
        self._align: dict[int, list[int]] = {}  # source clause per clause of a text, computed when a span needs it
        self._df: Counter[str] | None = None  # in how many texts each content word is
        self._ctx: _Contexts | None = None  # the texts' words in their neighbours' context, built on first use
        self._hits: tuple[list[str], np.ndarray] | None = None  # source stems x texts rendering counts, on first use
        self._weights: tuple[np.ndarray, list[int]] | None = None  # stem reliabilities and the tail's columns

    def signals(self, i: int) -> dict[str, SignalResult]:
        if not self.src.render:
            reason = "no source word is in the translation lexicon"
            return {name: SignalSkipped(reason=reason) for name in COVERAGE_SIGNALS}
        peers = [k for k in range(len(self.views)) if k != i]
        n = len(peers)
        out: dict[str, SignalResult] = {
            # the source alone speaks for these, the peers' consensus more the more peers there are
            "source_omission": self._omission(i, peers),
            "unlicensed_content": self._addition(i, peers),
            "source_tail_omission": self._tail_omission(i),
        }
        # phrases the peers share need one peer at least; a swap or a negation in another place needs voters (a
        # lone peer's wording is no consensus), so these read nothing below that many peers rather than a zero
        out["phrase_omission"] = self._phrase_omission(i, peers) if n else SignalSkipped(reason=NEEDS_PEER)
        out["term_substitution"] = self._substitution(i, peers) if n >= 2 else SignalSkipped(reason=NEEDS_PEERS)
        out["negation_context"] = self._negation_context(i, peers) if n >= 2 else SignalSkipped(reason=NEEDS_PEERS)
        return {name: out[name] for name in COVERAGE_SIGNALS}

    # ------------------------------------------------------------------------------------------------ omission
    def _omission(self, i: int, peers: list[int]) -> SignalValue:
        """Renderings the candidate lacks: against the peers' median counts of the stems most of them render, and
        against the source alone (each content stem rendered once at least, weighed by how reliably it is rendered),
        blended by the number of peers (``PEERS_FULL``)."""
        n = len(peers)
        stems, hits = self._hit_matrix()
        mine = hits[i]
        reliable, _ = self._source_weights()
        gone_src = (mine == 0) & (reliable > 0)
        alone = float(reliable[gone_src].sum() / reliable.sum()) if reliable.sum() else 0.0
        weight = min(1.0, n / PEERS_FULL)
        detail: dict[str, object] = {"peers": n, "peer_weight": weight, "source_only": round(alone, 4)}
        by_peers, missing = 0.0, list[tuple[float, str, bool]]()  # (share, stem, whether peers render it)
        if n:
            ph = hits[peers]
            shares = (ph > 0).sum(axis=0) / n
            keep = shares >= 0.5
            # medians of counts are halves at worst, so these sums are exact whatever the order
            med = _column_medians(ph[:, keep])
            expected = float(med.sum())
            lost = float(np.maximum(0.0, med - mine[keep]).sum())
            gone = (mine == 0) & (shares >= MAJORITY)
            missing = [(float(shares[j]), stems[j], True) for j in np.flatnonzero(gone)]
            by_peers = lost / expected if expected else 0.0
            detail["renderings_expected"] = round(expected, 1)
        value = weight * by_peers + (1.0 - weight) * alone
        if weight < 1.0 and value > 0:
            # what the source alone expects and the peers (when any) do not contradict
            said = {stems[j] for j in np.flatnonzero(mine > 0)} | {s for _, s, _ in missing}
            if n:
                said |= {stems[j] for j in np.flatnonzero(hits[peers].sum(axis=0) == 0)}
            unsaid = [j for j in np.flatnonzero(gone_src) if stems[j] not in said]
            missing += [(float(reliable[j]) / 2, stems[j], False) for j in unsaid]
        detail["missing_stems"] = len(missing)
        if missing and value > 0:
            missing.sort(key=lambda m: (-m[0], m[1]))
            words = ", ".join(self._missing_word(s, peers if seen else [], sh) for sh, s, seen in missing[:3])
            gap = self._gap(i, [s for _, s, _ in missing])
            against = f"its {n} peers" if weight == 1.0 else f"the source and its {n} peers" if n else "the source"
            detail["summary"] = (
                f"omission: the candidate renders {value:.0%} fewer of the source's words than {against} expect; "
                f"nowhere: {words}"
            )
            detail["spans"] = [[gap, gap]]
        return SignalValue(value=round(min(1.0, value), 4), detail=detail)

    def _missing_word(self, s: str, peers: list[int], share: float) -> str:
        """A source word the candidate renders nowhere, with what the peers (or the lexicon) render it as."""
        n = len(peers)
        said = self._peer_word(s, peers) if peers else ""
        if said and said != s:
            return f"{self.src.display.get(s, s)} ({round(share * n)}/{n} peers: {said})"
        usual = max(self.src.render[s].items(), key=lambda kv: kv[1])[0] if self.src.render[s] else s
        return f"{self.src.display.get(s, s)} (usually {usual})"

    def _tail_omission(self, i: int) -> SignalValue:
        """Truncation, from the source alone: the share of the content that only the source's last quarter holds
        (stems not said before it, weighed by how reliably they are rendered) that the candidate renders nowhere."""
        stems, hits = self._hit_matrix()
        reliable, tail = self._source_weights()
        total = float(reliable[tail].sum()) if tail else 0.0
        if not total:
            return SignalValue(value=0.0, detail={"tail_stems": 0})
        gone = [j for j in tail if hits[i, j] == 0]
        value = float(reliable[gone].sum()) / total
        detail: dict[str, object] = {"tail_stems": len(tail), "missing_stems": len(gone)}
        if gone and value >= 0.5:
            words = ", ".join(self._missing_word(stems[j], [], 0.0) for j in gone[:3])
            end = len(self.views[i].text.rstrip())
            detail["summary"] = (
                f"truncation: the candidate renders {value:.0%} of what only the end of the source says nowhere: "
                f"{words}"
            )
            detail["spans"] = [[end, end]]
        return SignalValue(value=round(value, 4), detail=detail)

    def _source_weights(self) -> tuple[np.ndarray, list[int]]:
        """How reliably each source stem of the hit matrix is rendered, and the columns only the source's last
        quarter holds; once per passage (every candidate reads the same source)."""
        if self._weights is None:
            stems, _ = self._hit_matrix()
            col = {s: j for j, s in enumerate(stems)}
            reliable = self.src.reliability(stems)
            order = [s for st, _, _ in self.src.clauses for s in st if s in col and reliable[col[s]] > 0]
            cut = int(len(order) * (1.0 - TAIL_SHARE))
            head = set(order[:cut])
            self._weights = (reliable, [col[s] for s in dict.fromkeys(order[cut:]) if s not in head])
        return self._weights

    def _hit_matrix(self) -> tuple[list[str], np.ndarray]:
        """The source's content stems and how often each text renders them (texts x stems), built once."""
        if self._hits is None:
            stems = list(self.src.render)
            rows = [[c.hits[s] for s in stems] for c in self.counts]
            self._hits = (stems, np.array(rows, dtype=float).reshape(len(self.counts), len(stems)))
        return self._hits

    def _peer_word(self, s: str, peers: list[int]) -> str:
        """The rendering of source stem ``s`` the peers use most."""
        votes: Counter[str] = Counter()
        for k in peers:
            for e in self.src.render[s]:
                votes[e] += self.views[k].counts.get(e, 0)
        return votes.most_common(1)[0][0] if votes else s

    def _gap(self, i: int, missing: list[str]) -> int:
        """Where the missing content would sit in the candidate: after the clause aligned to the source clause
        before the first source clause holding a missing stem."""
        first = next((j for j, (st, _, _) in enumerate(self.src.clauses) if any(s in missing for s in st)), 0)
        align = self._align.get(i)
        if align is None:
            align = self._align[i] = self._clause_alignment(self.views[i])
        view = self.views[i]
        before = [c for c, a in enumerate(align) if a < first]
        if not before or not view.clauses:
            return 0
        return view.after(view.clauses[before[-1]])

    # ------------------------------------------------------------------------------------------------ addition
    def _addition(self, i: int, peers: list[int]) -> SignalValue:
        view = self.views[i]
        shared: set[str] = set()
        for k in peers:
            shared |= self.views[k].counts.keys()
        total = max(1, view.size)
        worst, worst_range, added = 0, None, 0
        for rng in view.sentences:
            words = [view.stems[t] for t in rng if view.content[t]]
            unsupported = [e for e in words if e not in shared and not self.src.licenses(e)]
            if len(unsupported) >= 2 and 2 * len(unsupported) >= len(words):
                added += len(unsupported)
                if len(unsupported) > worst:
                    worst, worst_range = len(unsupported), rng
        value = added / total
        detail: dict[str, object] = {"unsupported_words": added, "peers": len(peers)}
        if worst_range is not None:
            a, b = view.span_of(worst_range)
            detail["summary"] = (
                f"addition: {added} content words that no source word licenses and none of {len(peers)} peers has, "
                "e.g. "
                f"\u201c{_clip(view.text[a:b])}\u201d"
            )
            detail["spans"] = [[a, b]]
        return SignalValue(value=round(min(1.0, value), 4), detail=detail)

    # ------------------------------------------------------------------------------------------------ substitution
    def _substitution(self, i: int, peers: list[int]) -> SignalValue:
        """A word few peers use, a strong rendering of some Pali stem, standing between the same words where the
        peers say another word, one that renders a source stem and shares no Pali stem with it ("the noble truth
        of craving" where the peers say "the noble truth of suffering"); half the evidence when the source licenses
        the word elsewhere."""
        n = len(peers)
        view, ctx = self.views[i], self._contexts()
        seq = ctx.seqs[i]
        best, what = 0.0, None
        df = self._document_frequency()
        for w in view.counts:
            users = df[w] - 1  # the texts with the word, less the candidate
            if users > n / 3:
                continue
            origin = self.lex.term_origin(w)
            # a term: the usual rendering of a frequent Pali word (a rare compound's word is a paraphrase's)
            if origin[1] < SOURCE_OF_MIN or origin[2] < TERM_COUNT_MIN:
                continue
            licensed = self.src.licenses(w) or self.src.has_part(origin[0])
            strength = (1.0 - users / n) * (0.5 if licensed else 1.0)
            if strength <= best:
                continue
            support: dict[str, set[int]] = {}
            for t in view.at[w]:
                for m, texts in ctx.in_place_of(seq, t).items():
                    support.setdefault(m, set()).update(texts)
            for m, texts in support.items():
                voters = len(texts - {i})
                if voters < 2 or m == w or m not in self.src.rendered_by or self._synonyms(w, m):
                    continue
                score = voters / n * strength
                if score > best:
                    best, what = score, (self.src.rendered_by[m][0], m, w, origin[0], voters, licensed)
        if what is None:
            return SignalValue(value=0.0)
        s, m, w, other, voters, licensed = what
        places = [list(view.spans[t]) for t in view.at[w]]
        said = view.text[places[0][0] : places[0][1]] if places else w
        absent = "which is in the source too" if licensed else "which is not in the source"
        summary = (
            f"term: the source's {self.src.display.get(s, s)} is rendered by {voters}/{n} peers as {m} in this "
            f"place; the candidate has {said}, a rendering of {self._pali_display(other)}, {absent}"
        )
        return SignalValue(value=round(min(1.0, best), 4), detail={"summary": summary, "spans": places})

    # ------------------------------------------------------------------------------------------------ omission
    def _phrase_omission(self, i: int, peers: list[int]) -> SignalValue:
        """The three-word phrases most peers share that the candidate has fewer times than the peers do, as a share
        of those phrases' peer counts: a dropped sentence takes a run of them (repeats counted, as the suttas
        repeat); located after the last shared phrase before the first one missing, in a peer's order."""
        n = len(peers)
        ctx = self._contexts()
        mine = ctx.counts[i]
        # the trigrams in enough texts (the peers using one are at most its texts), then the peers' own count
        grams, counts = ctx.shared(MAJORITY * n)
        ph = counts[peers]
        keep = (ph > 0).sum(axis=0) >= MAJORITY * n
        med = _column_medians(ph[:, keep])
        own = counts[i, keep]
        # medians of counts are halves at worst, so these sums are exact whatever the order
        expected = float(med.sum())
        short = own < med
        lost = float((med - own)[short].sum())
        kept = [g for g, k in zip(grams, keep, strict=True) if k]
        missing = {kept[j] for j in np.flatnonzero(short)}
        # a few shared phrases say little (peers that differ share few): their loss counts against a floor
        value = lost / (expected + PHRASE_FLOOR)
        if not missing:
            return SignalValue(value=round(value, 4))
        # a peer that has the missing phrases: the last phrase before the first one missing that the candidate has
        seq_i, view = ctx.seqs[i], self.views[i]
        peer = max(peers, key=lambda k: sum(1 for g in missing if ctx.counts[k][g]))
        seq = ctx.seqs[peer]
        first = next(t for t in range(2, len(seq)) if tuple(seq[t - 2 : t + 1]) in missing)
        gap, phrase = 0, " ".join(seq[first - 2 : first + 6])
        for t in range(first - 1, 1, -1):
            g = tuple(seq[t - 2 : t + 1])
            if mine[g]:
                at = next(u for u in range(2, len(seq_i)) if tuple(seq_i[u - 2 : u + 1]) == g)
                gap = view.after(range(at, at + 1))
                break
        summary = (
            f"omission: {len(missing)} phrases most of the {n} peers share are missing or fewer, "
            f"{value:.0%} of what they have in common, e.g. \u201c{phrase}\u201d"
        )
        return SignalValue(value=round(value, 4), detail={"summary": summary, "spans": [[gap, gap]]})

    def _document_frequency(self) -> Counter[str]:
        if self._df is None:
            self._df = Counter(w for v in self.views for w in v.counts)
        return self._df

    def _synonyms(self, w: str, m: str) -> bool:
        """Whether two English stems render a common Pali stem (either is among the other's sources' renderings)."""
        a = {s[:_PREFIX] for s, p in self.lex.source_of.get(w, {}).items() if p >= RENDER_MIN}
        b = {s[:_PREFIX] for s, p in self.lex.source_of.get(m, {}).items() if p >= RENDER_MIN}
        return bool(a & b)

    def _contexts(self) -> _Contexts:
        if self._ctx is None:
            # the substitution asks which rendering of a source stem the peers put in a place
            self._ctx = _Contexts([v.stems for v in self.views], self.src.rendered_by)
        return self._ctx

    # ------------------------------------------------------------------------------------------------ negation
    def _negation_context(self, i: int, peers: list[int]) -> SignalValue:
        """A negator the peers put between two words the candidate says one after the other (with the word before
        or after agreeing too), or one the candidate puts where the peers go straight on: the peers who say it the
        other way, as a share (at least NEGATION_VOTERS of them)."""
        n = len(peers)
        ctx, view = self._contexts(), self.views[i]
        seq = ctx.seqs[i]
        best, where, dropped = NEGATION_VOTERS - 1, -1, False
        for t in range(len(seq) - 1):
            a, b = seq[t], seq[t + 1]
            if a == _NEG or b == _NEG:
                continue
            voters = set()
            if t >= 1:
                voters |= ctx.neg_quads.get((seq[t - 1], a, _NEG, b), set())
            if t + 2 < len(seq):
                voters |= ctx.neg_quads.get((a, _NEG, b, seq[t + 2]), set())
            voters.discard(i)
            if len(voters) > best:
                best, where, dropped = len(voters), t, True
        for t in range(1, len(seq) - 1):
            if seq[t] != _NEG or seq[t + 1] == _NEG:
                continue
            a, b = seq[t - 1], seq[t + 1]
            voters = set()
            if t >= 2:
                voters |= ctx.trigrams.get((seq[t - 2], a, b), set())
            if t + 2 < len(seq):
                voters |= ctx.trigrams.get((a, b, seq[t + 2]), set())
            voters -= ctx.trigrams.get((a, _NEG, b), set())
            voters.discard(i)
            if len(voters) > best:
                best, where, dropped = len(voters), t, False
        if where < 0:
            return SignalValue(value=0.0)
        if dropped:
            span = [view.spans[where][0], view.spans[where + 1][1]]
            summary = (
                f"negation: {best}/{n} peers negate between the words the candidate has here, "
                f"\u201c{view.text[span[0] : span[1]]}\u201d; the candidate does not"
            )
        else:
            span = list(view.spans[where])
            lo, hi = view.spans[where - 1][0], view.spans[where + 1][1]
            summary = (
                f"negation: the candidate negates \u201c{view.text[lo:hi]}\u201d where {best}/{n} peers say it "
                "without a negator"
            )
        return SignalValue(value=round(best / n, 4), detail={"summary": summary, "spans": [span], "dropped": dropped})

    def _pali_display(self, stem: str) -> str:
        return self.src.display.get(stem, stem + "-")

    # ------------------------------------------------------------------------------------------- clause alignment
    def _clause_alignment(self, view: TextView) -> list[int]:
        """Source clause index per candidate clause: monotone, maximising lexical matches (a dynamic programme with
        a small pull towards the proportional position)."""
        n_src, n_cl = len(self.src.clauses), len(view.clauses)
        if not n_cl or not n_src:
            return [0] * n_cl
        match = np.zeros((n_cl, n_src))
        for j, rng in enumerate(view.clauses):
            for t in rng:
                for s_idx in self.src.clause_of.get(view.stems[t], ()):
                    match[j, s_idx] += 1.0
        pos = np.abs((np.arange(n_cl)[:, None] + 0.5) / n_cl - (np.arange(n_src)[None, :] + 0.5) / n_src)
        gain = match - 0.5 * pos
        best = np.empty_like(gain)
        back = np.zeros((n_cl, n_src), dtype=np.int64)
        best[0] = gain[0]
        for j in range(1, n_cl):
            run = np.maximum.accumulate(best[j - 1])
            # index of the running maximum (the source clause the previous candidate clause took)
            idx = np.arange(n_src)
            is_new = np.concatenate(([True], best[j - 1][1:] > run[:-1]))
            arg = np.maximum.accumulate(np.where(is_new, idx, 0))
            best[j] = gain[j] + run
            back[j] = arg
        out = [0] * n_cl
        out[-1] = int(np.argmax(best[-1]))
        for j in range(n_cl - 1, 0, -1):
            out[j - 1] = int(back[j][out[j]])
        return out


_NEG = "\u00ac"  # every negator reads as one token in the contexts ("not", "no", "never" say the same here)
# peers that must say a negation the other way before negation_context reads anything: its flag forces a candidate
# to the top, and two of three peers (a small batch's whole consensus) agreeing on a wording is not evidence enough
NEGATION_VOTERS = 3


_CONTEXT_NEGATORS = frozenset({"not", "no", "never", "nor"})


class _Contexts:
    """Every text's words between their neighbours, to ask which texts say what in the same place: the word between
    the same two words, after the same two, or before the same two; and where a negator stands between two words
    or does not."""

    def __init__(self, stems: list[list[str]], places: Container[str]) -> None:
        self.seqs = [[_NEG if s in _CONTEXT_NEGATORS else s for s in st] for st in stems]
        self.mid: dict[tuple[str, str], dict[str, set[int]]] = {}
        self.left: dict[tuple[str, str], dict[str, set[int]]] = {}
        self.right: dict[tuple[str, str], dict[str, set[int]]] = {}
        self.trigrams: dict[tuple[str, ...], set[int]] = {}
        self.neg_quads: dict[tuple[str, ...], set[int]] = {}  # the four words around a negator, either side
        self.counts: list[Counter[tuple[str, ...]]] = []  # every text's trigrams with their counts
        self._shared: tuple[float, list[tuple[str, ...]], np.ndarray] | None = None
        for k, seq in enumerate(self.seqs):
            counts: Counter[tuple[str, ...]] = Counter()
            self.counts.append(counts)
            for t in range(len(seq)):
                w = seq[t]
                if t >= 2:
                    self.trigrams.setdefault((seq[t - 2], seq[t - 1], w), set()).add(k)
                    counts[(seq[t - 2], seq[t - 1], w)] += 1
                if w == _NEG and 1 <= t < len(seq) - 1:
                    if t >= 2:
                        self.neg_quads.setdefault(tuple(seq[t - 2 : t + 2]), set()).add(k)
                    if t + 2 < len(seq):
                        self.neg_quads.setdefault(tuple(seq[t - 1 : t + 3]), set()).add(k)
                if w not in places:  # only the words asked about are indexed by their neighbours
                    continue
                if t >= 1 and t + 1 < len(seq):
                    self.mid.setdefault((seq[t - 1], seq[t + 1]), {}).setdefault(w, set()).add(k)
                if t >= 2:
                    self.left.setdefault((seq[t - 2], seq[t - 1]), {}).setdefault(w, set()).add(k)
                if t + 2 < len(seq):
                    self.right.setdefault((seq[t + 1], seq[t + 2]), {}).setdefault(w, set()).add(k)

    def shared(self, min_texts: float) -> tuple[list[tuple[str, ...]], np.ndarray]:
        """The trigrams in at least ``min_texts`` texts and their counts per text (texts x trigrams), once."""
        if self._shared is None or self._shared[0] != min_texts:
            grams = [g for g, texts in self.trigrams.items() if len(texts) >= min_texts]
            counts = np.array([[c[g] for g in grams] for c in self.counts], dtype=float).reshape(len(self.counts), -1)
            self._shared = (min_texts, grams, counts)
        return self._shared[1], self._shared[2]

    def in_place_of(self, seq: list[str], t: int) -> dict[str, set[int]]:
        """word -> the texts that have it where ``seq`` has its word ``t`` (same neighbours on one side or both)."""
        out: dict[str, set[int]] = {}
        keys = []
        if t >= 1 and t + 1 < len(seq):
            keys.append((self.mid, (seq[t - 1], seq[t + 1])))
        if t >= 2:
            keys.append((self.left, (seq[t - 2], seq[t - 1])))
        if t + 2 < len(seq):
            keys.append((self.right, (seq[t + 1], seq[t + 2])))
        for index, key in keys:
            for w, texts in index.get(key, {}).items():
                out.setdefault(w, set()).update(texts)
        return out


def _column_medians(a: np.ndarray) -> np.ndarray:
    """The median of every column, as ``statistics.median`` takes it (the mean of the middle two of an even count);
    a sort and an index, as ``np.median`` costs a hundred microseconds a call on these few rows."""
    rows = a.shape[0]
    if not a.size:
        return np.zeros(a.shape[1])
    a = np.sort(a, axis=0)
    mid = rows // 2
    return a[mid] if rows % 2 else (a[mid - 1] + a[mid]) / 2


def _clip(text: str, limit: int = 120) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
