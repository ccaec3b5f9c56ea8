"""Clause alignment against peer translations: negation flips, doctrinal-term swaps and content size, located.

Passage-level counts drown one flipped "not" among the dozens of negations a sutta passage holds, and translators
legitimately trade "not permanent" for "impermanent". Aligning clauses makes the comparison local: a peer clause
that negates a word is matched to the candidate clause that shares most of its content words, and only a candidate
that has the same word there, un-negated (or fewer negators where the words match), counts as a flip. Parallel
clauses ("a mind with lust ... a mind without lust") match equally well, so a flip needs every equally good match
to disagree.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

from service.core.critical.build_glossary import EN_STOP
from service.core.critical.tokens import en_stem, privative, word_tokens

__all__ = [
    "ClauseRow",
    "Flip",
    "Parsed",
    "Uncovered",
    "clause_rows",
    "content_excess",
    "negation_flips",
    "parse",
    "term_swap",
    "uncovered",
]

# "non" as in non-self (not-self), written with a hyphen the tokens split at
_NEG = frozenset("not non no never nor neither none nothing nobody nowhere without cannot unable".split())
# Forms of address sit between a negator and what it negates ("No, venerable sir"); they are never its content.
_ADDRESS = frozenset(
    "sir sirs venerable reverend householder dear friend friends lord master mendicants monks bhikkhus brahmin".split()
)
# Function words carry no content for matching (the glossary builder's list; negators are tracked before it applies).
_STOP = EN_STOP | {"indeed", "yes"}
_CLAUSE = re.compile(r"(?<=[.!?;:])[\"”’']?\s+")
_NT = re.compile(r"n['’]t\b", re.IGNORECASE)
# A negator governs the next content words ("not for play", "is not hostile").
_SCOPE = 2
# Clauses match when their content-word Dice overlap reaches this; matches within _TIE of the best are as good.
_MIN_DICE = 0.5
_TIE = 0.15
# A peer whose clause has more negators over the same words, but no word-level flip, is half the evidence.
_SOFT = 0.5
_MAX_NEG = 2
# A clause or an adjacent pair: (clause indices, content stems, negated stems, negator count).
_Window = tuple[tuple[int, ...], frozenset[str], frozenset[str], int]


class _Clause:
    __slots__ = ("end", "neg", "negw", "priv", "start", "stems", "text")

    def __init__(
        self, stems: frozenset[str], negw: frozenset[str], neg: int, text: str, start: int, end: int, priv: int = 0
    ) -> None:
        self.stems = stems
        self.negw = negw  # stems under a negator or a privative (undeveloped: developed)
        self.neg = neg
        self.priv = priv  # privatives: they answer another text's negator, never make a flip of their own
        self.text = text
        self.start = start  # character offsets of the clause in the parsed text
        self.end = end


class Parsed:
    """A translation as clauses (content stems, negated stems, negator count), a bag of content stems and where each
    stem occurs (character offsets)."""

    __slots__ = ("_windows", "bag", "clauses", "places", "size")

    def __init__(self, clauses: list[_Clause], bag: Counter[str], places: dict[str, list[tuple[int, int]]]) -> None:
        self.clauses = clauses
        self.bag = bag
        self.places = places
        self.size = sum(bag.values())
        self._windows: list[_Window] | None = None

    def windows(self) -> list[_Window]:
        """Single clauses and adjacent pairs, since translators split and merge sentences differently."""
        if self._windows is None:
            w: list[_Window] = []
            cl = self.clauses
            # a window's count is what it answers: its negators and its privatives
            for i, c in enumerate(cl):
                w.append(((i,), c.stems, c.negw, c.neg + c.priv))
                if i + 1 < len(cl):
                    d = cl[i + 1]
                    w.append(((i, i + 1), c.stems | d.stems, c.negw | d.negw, c.neg + c.priv + d.neg + d.priv))
            self._windows = w
        return self._windows


def _clause_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of each clause of ``text``: split after sentence and clause punctuation followed by space."""
    out, at = [], 0
    for m in _CLAUSE.finditer(text):
        out.append((at, m.start()))
        at = m.end()
    out.append((at, len(text)))
    return out


def parse(text: str) -> Parsed:
    """Clauses of an English text with their content stems, the stems under a negator, and the negator count."""
    clauses: list[_Clause] = []
    bag: Counter[str] = Counter()
    places: dict[str, list[tuple[int, int]]] = {}
    # every offset is in the NFC text, as word_tokens' are (the candidate is shown and highlighted in that form)
    text = unicodedata.normalize("NFC", text)
    for a, b in _clause_spans(text):
        raw = text[a:b]
        stems: set[str] = set()
        negw: set[str] = set()
        neg = priv = pending = 0
        # "don't" is "do not": the apostrophe splits it into "don" (read as "do") and "t" (read as "not")
        nt_at = {m.start() + 2 for m in _NT.finditer(raw)}
        for tok in word_tokens(raw):
            t = tok.lower
            if tok.start in nt_at and t == "t":
                t = "not"
            elif tok.start + len(t) + 1 in nt_at and t.endswith("n"):
                t = t[:-1]
            if t in _NEG:
                neg += 1
                pending = _SCOPE
                continue
            if t in _STOP or len(t) < 3:
                continue
            base = privative(t)
            if base is not None:
                priv += 1
                t = base
                negw.add(en_stem(t))
            st = en_stem(t)
            stems.add(st)
            bag[st] += 1
            places.setdefault(st, []).append((a + tok.start, a + tok.start + len(tok.text)))
            if pending and t not in _ADDRESS and not (tok.capital and not tok.sentence_start):
                negw.add(st)
                pending -= 1
        if stems:
            clauses.append(_Clause(frozenset(stems), frozenset(negw), neg, raw.strip(), a, b, priv))
    return Parsed(clauses, bag, places)


def _dice(a: frozenset[str], b: frozenset[str]) -> float:
    return 2 * len(a & b) / (len(a) + len(b))


def _match(
    stems: frozenset[str], windows: Sequence[_Window]
) -> tuple[_Window | None, list[tuple[frozenset[str], int]]]:
    """The best window by Dice overlap and every window about as good (negated stems and negator counts)."""
    scored = [(_dice(stems, w[1]), w) for w in windows]
    top = max((d for d, _ in scored), default=0.0)
    if top < _MIN_DICE:
        return None, []
    best = next(w for d, w in scored if d == top)
    return best, [(w[2], w[3]) for d, w in scored if d >= top - _TIE]


class Flip:
    """Where peers disagree with the candidate about a negation: share of peers, the clause (its text and character
    offsets in the candidate) and the words."""

    __slots__ = ("clause", "share", "span", "words")

    def __init__(self, share: float, clause: str, words: list[str], span: tuple[int, int]) -> None:
        self.share = share
        self.clause = clause
        self.words = words
        self.span = span


def _flip_votes(src: Parsed, other: Parsed) -> list[tuple[int, tuple[int, ...], set[str]]]:
    """Clauses of ``src`` that negate what ``other`` states un-negated at the best matching place: (clause index in
    ``src``, matched clause indices in ``other``, the flipped words; empty words = fewer negators only)."""
    votes: list[tuple[int, tuple[int, ...], set[str]]] = []
    windows = other.windows()
    for i, c in enumerate(src.clauses):
        if not c.neg or c.neg > _MAX_NEG:
            continue
        best, alts = _match(c.stems, windows)
        if best is None or best[3] >= c.neg:
            continue
        words = {w for w in c.negw if w in best[1] and not any(w in a[0] for a in alts)}
        if words or all(a[1] < c.neg for a in alts):
            votes.append((i, best[0], words))
    return votes


def negation_flips(cand: Parsed, peers: Sequence[Parsed]) -> tuple[Flip | None, Flip | None]:
    """(dropped, added): the candidate clause where most peers keep a negation it lacks, and where it negates what
    most peers affirm. ``share`` counts a peer with a word-level flip as 1 and one with only fewer/more negators as
    ``_SOFT``."""
    n = len(peers)
    if not n:
        return None, None
    tallies: tuple[dict[int, float], dict[int, float]] = ({}, {})
    words: tuple[dict[int, Counter[str]], dict[int, Counter[str]]] = ({}, {})
    for p in peers:
        # dropped: the peer negates, the candidate does not (positions in the candidate are the matched clauses);
        # added: the candidate negates, the peer does not (positions are the candidate's own clauses)
        dropped = [(j, ws) for _, where, ws in _flip_votes(p, cand) for j in where]
        added = [(i, ws) for i, _, ws in _flip_votes(cand, p)]
        for side, votes in enumerate((dropped, added)):
            best: dict[int, float] = {}
            for j, ws in votes:
                best[j] = max(best.get(j, 0.0), 1.0 if ws else _SOFT)
                if ws:
                    words[side].setdefault(j, Counter()).update(ws)
            for j, v in best.items():
                tallies[side][j] = tallies[side].get(j, 0.0) + v

    def worst(side: int) -> Flip | None:
        if not tallies[side]:
            return None
        j, v = max(tallies[side].items(), key=lambda kv: (kv[1], -kv[0]))
        text = cand.clauses[j].text.lower()
        # most voted first, then in reading order (sets have no stable order across processes)
        ranked = sorted(words[side].get(j, Counter()).items(), key=lambda kv: (-kv[1], _position(text, kv[0]), kv[0]))
        c = cand.clauses[j]
        return Flip(min(1.0, v / n), c.text, [w for w, _ in ranked[:2]], (c.start, c.end))

    return worst(0), worst(1)


def _position(text: str, stem: str) -> int:
    at = text.find(stem)
    return at if at >= 0 else len(text)


def term_swap(
    cand: Parsed, peers: Sequence[Parsed], rendering: Mapping[str, Sequence[str]]
) -> tuple[float, str, list[tuple[int, int]]]:
    """A doctrinal rendering most peers use that the candidate lacks, with another term's rendering in its place as
    often: the signature of a misread term ("craving" throughout where the peers say "suffering").

    ``rendering`` maps an English stem to the glossary terms it renders. Returns (score in [0, 1], "w -> w2", where
    the candidate has w2)."""
    n = len(peers)
    if n < 3:
        return 0.0, "", []
    users: Counter[str] = Counter()
    for p in peers:
        users.update(w for w in p.bag if w in rendering)
    missing = []
    for w, k in users.items():
        if cand.bag[w] == 0 and k >= 0.75 * n:
            count = statistics.median(p.bag[w] for p in peers)
            if count >= 1:
                missing.append((w, k / n, count))
    best, what, where = 0.0, "", ""
    if not missing:
        return best, what, []
    for w2, have in cand.bag.items():
        k2 = users[w2]
        if w2 not in rendering or k2 > n / 3:
            continue
        excess = have - statistics.median(p.bag[w2] for p in peers)
        if excess < 1:
            continue
        for w, share, count in missing:
            # as often as the missing word, and not another rendering of the same Pali term (a synonym)
            if abs(excess - count) > max(1.0, 0.25 * count) or set(rendering[w]) & set(rendering[w2]):
                continue
            # and in its place: the peers' clauses with w align to candidate clauses with w2 (chance pairings of
            # a missing and an extra word, which equal counts alone let through, fail here)
            placed = sum(1 for p in peers if _in_place(p, cand, w, w2)) / n
            s = min(share, placed) * (1.0 - k2 / n)
            if s > best:
                best, what, where = s, f"{w} -> {w2}", w2
    return best, what, cand.places.get(where, []) if where else []


def _in_place(peer: Parsed, cand: Parsed, w: str, w2: str) -> bool:
    """Most of the peer's clauses that use ``w`` match a candidate clause (or pair) that uses ``w2`` instead."""
    hits = total = 0
    windows = cand.windows()
    for c in peer.clauses:
        if w not in c.stems:
            continue
        total += 1
        rest = c.stems - {w}
        if not rest:  # the term alone ("There is no suffering."): a clause that is w2 alone is its place
            hits += any(win[1] == {w2} for win in windows)
            continue
        top, where = 0.0, frozenset[str]()
        for win in windows:
            d = _dice(rest, win[1])
            if d > top:
                top, where = d, win[1]
        hits += top >= 0.3 and w2 in where
    return total > 0 and 2 * hits > total


def content_excess(cand: Parsed, peers: Sequence[Parsed]) -> float:
    """Content words beyond the peers' median, as a share of it (0.3 = a third more; 0 when not longer): added
    sentences show here more plainly than in character lengths, which translators' verbosity blurs."""
    sizes = [p.size for p in peers]
    if not sizes:
        return 0.0
    return max(0.0, cand.size / max(statistics.median(sizes), 1.0) - 1.0)


# Clause pairs below this Dice overlap are not aligned; an unaligned clause still counts as covered when half of its
# content words sit in the candidate between its aligned neighbours (a sentence split or merged differently).
_ALIGN_DICE = 0.2
_COVERED = 0.5


def _aligned_pairs(a: Sequence[frozenset[str]], b: Sequence[frozenset[str]]) -> dict[int, int]:
    """Monotone one-to-one clause alignment maximising summed Dice overlap (a small dynamic programme)."""
    k, m = len(a), len(b)
    score = [[0.0] * (m + 1) for _ in range(k + 1)]
    move = [[0] * (m + 1) for _ in range(k + 1)]
    for i in range(1, k + 1):
        sa, row, up, mv = a[i - 1], score[i], score[i - 1], move[i]
        la = len(sa)
        for j in range(1, m + 1):
            best, how = up[j], 1
            if row[j - 1] > best:
                best, how = row[j - 1], 2
            x = len(sa & b[j - 1])
            if x:
                d = 2 * x / (la + len(b[j - 1]))
                if d >= _ALIGN_DICE and up[j - 1] + d > best:
                    best, how = up[j - 1] + d, 3
            row[j], mv[j] = best, how
    pairs: dict[int, int] = {}
    i, j = k, m
    while i > 0 and j > 0:
        how = move[i][j]
        if how == 3:
            pairs[i - 1] = j - 1
            i, j = i - 1, j - 1
        elif how == 1:
            i -= 1
        else:
            j -= 1
    return pairs


def _uncovered_in(a: Parsed, b: Parsed) -> tuple[float, str, tuple[int, int], int]:
    """Share of ``a``'s content words in clauses that ``b`` neither aligns nor covers nearby; the largest such
    clause of ``a``, its character offsets in ``a`` and the offset in ``b`` where it would have been (after the
    clause of ``b`` aligned before it)."""
    sa = [c.stems for c in a.clauses]
    sb = [c.stems for c in b.clauses]
    pairs = _aligned_pairs(sa, sb)
    prev = [-1] * len(sa)
    nxt = [len(sb)] * len(sa)
    last = -1
    for i in range(len(sa)):
        last = pairs.get(i, last)
        prev[i] = last
    last = len(sb)
    for i in range(len(sa) - 1, -1, -1):
        last = pairs.get(i, last)
        nxt[i] = last
    total = sum(len(s) for s in sa)
    lost, worst = 0, ""
    worst_size, worst_span, gap = 0, (0, 0), 0
    for i, s in enumerate(sa):
        if i in pairs or len(s) < 3:
            continue
        region: set[str] = set()
        for j in range(max(0, prev[i]), min(len(sb) - 1, nxt[i]) + 1):
            region |= sb[j]
        if len(s & region) < _COVERED * len(s):
            lost += len(s)
            if len(s) > worst_size:
                c = a.clauses[i]
                worst, worst_size, worst_span = c.text, len(s), (c.start, c.end)
                gap = b.clauses[prev[i]].end if prev[i] >= 0 else (b.clauses[0].start if b.clauses else 0)
    return lost / max(total, 1), worst, worst_span, gap


class Uncovered:
    """Median share of content left uncovered, how many peers see some, an example clause and where it sits in the
    candidate (the clause itself for added content; the place it is missing from, start = end, for omitted)."""

    __slots__ = ("example", "peers_with", "share", "span")

    def __init__(self, share: float, peers_with: int, example: str, span: tuple[int, int] | None = None) -> None:
        self.share = share
        self.peers_with = peers_with
        self.example = example
        self.span = span


def uncovered(cand: Parsed, peers: Sequence[Parsed]) -> tuple[Uncovered, Uncovered]:
    """(omitted, added): the median share of a peer's content the candidate does not cover (a dropped sentence
    leaves the same gap against every peer) and of the candidate's content no peer covers (an added one)."""
    if not peers:
        return Uncovered(0.0, 0, ""), Uncovered(0.0, 0, "")
    omitted = [_uncovered_in(p, cand) for p in peers]
    added = [_uncovered_in(cand, p) for p in peers]
    out = []
    for side, rows in enumerate((omitted, added)):
        share = statistics.median(r[0] for r in rows)
        examples = Counter(r[1] for r in rows if r[0] > 0 and r[1])
        example = examples.most_common(1)[0][0] if examples else ""
        span = None
        if example:
            r = next(r for r in rows if r[1] == example)
            span = (r[3], r[3]) if side == 0 else r[2]
        out.append(Uncovered(share, sum(1 for r in rows if r[0] > 0), example, span))
    return out[0], out[1]


class ClauseRow:
    """One row of a candidate set side by side: a candidate clause (or none) and one clause (or none) per peer, as
    (start, end) in each text. ``matched[k]``: the alignment paired peer k's clause with this candidate clause; an
    unpaired one only stands in the same place of its text (beside a candidate clause that no clause of that peer
    matched, or in a row of its own: content the candidate may have left out)."""

    __slots__ = ("candidate", "matched", "peers")

    def __init__(self, candidate: tuple[int, int] | None, peers: list[tuple[int, int] | None], matched: list[bool]):
        self.candidate = candidate
        self.peers = peers
        self.matched = matched

    def __repr__(self) -> str:
        return f"ClauseRow({self.candidate!r}, {self.peers!r}, {self.matched!r})"


def clause_rows(candidate: Parsed, peers: Sequence[Parsed]) -> list[ClauseRow]:
    """The candidate's clauses in order beside the peers' clauses, paired as ``_aligned_pairs`` (the alignment behind
    omitted and added content) pairs them. A peer clause left unpaired takes the next free candidate row before its
    next paired clause, else a row of its own there; every text keeps its order down the rows."""
    n = len(candidate.clauses)
    cand = [c.stems for c in candidate.clauses]
    rows = [ClauseRow(_span(c), [None] * len(peers), [False] * len(peers)) for c in candidate.clauses]
    extra: dict[int, list[list[tuple[int, int]]]] = {}  # candidate row -> per peer, clauses in rows of their own
    for k, p in enumerate(peers):
        by_peer = {j: i for i, j in _aligned_pairs(cand, [c.stems for c in p.clauses]).items()}
        slot = 0
        for j, clause in enumerate(p.clauses):
            if j in by_peer:
                i = by_peer[j]
                rows[i].peers[k], rows[i].matched[k] = _span(clause), True
                slot = i + 1
                continue
            nxt = next((by_peer[x] for x in range(j + 1, len(p.clauses)) if x in by_peer), n)
            if slot < nxt:
                rows[slot].peers[k] = _span(clause)
                slot += 1
            else:
                extra.setdefault(nxt, [[] for _ in peers])[k].append(_span(clause))
    out: list[ClauseRow] = []
    for i in range(n + 1):
        gap = extra.get(i)
        if gap:
            for r in range(max(len(g) for g in gap)):
                out.append(ClauseRow(None, [g[r] if r < len(g) else None for g in gap], [False] * len(peers)))
        if i < n:
            out.append(rows[i])
    return out


def _span(clause: _Clause) -> tuple[int, int]:
    return (clause.start, clause.end)
