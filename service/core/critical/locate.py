"""Where a finding stands in the texts a reviewer reads: character spans in the candidate (and in the peers, for
content the candidate leaves out), so the workbench can highlight the number, name, negation or clause it names.

A flag that carries its own spans (a ``span`` or ``spans`` field: start and end in the candidate) is taken as it is;
until the checks record them, the spans are found again from what a flag carries today: its reviewer wording (the
values it names, the clause it quotes) and the checks' own extraction (``Extractor.english_marks``). ``locate`` is
the one place that decides it, so switching to recorded spans changes nothing else.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

from service.core.critical.check import default_checker
from service.core.critical.extract import number_word
from service.core.critical.tokens import en_stem, fold, word_tokens
from service.core.types import Flag

__all__ = ["Highlights", "Span", "locate"]

Span = tuple[int, int]  # [start, end) in the NFC form of the text
_QUOTED = re.compile(r"\u201c(.+?)\u201d|'([^']{3,})'")
_SAYS = re.compile(r"candidate says (.+)$")
_LABEL = re.compile(r"(?:^|,\s*)([^,(]+?)\s*\(")


class Highlights:
    """Spans in the candidate, and per peer (by position in the peers given), of one finding."""

    __slots__ = ("candidate", "peers")

    def __init__(self, candidate: list[Span], peers: list[list[Span]]) -> None:
        self.candidate = candidate
        self.peers = peers

    def __bool__(self) -> bool:
        return bool(self.candidate) or any(self.peers)

    def __repr__(self) -> str:
        return f"Highlights({self.candidate!r}, {self.peers!r})"


def locate(flag: Flag, candidate: str, peers: Sequence[str] = ()) -> Highlights:
    """The spans of ``flag`` in ``candidate`` (and in ``peers`` for omitted content); texts are taken in NFC."""
    candidate = unicodedata.normalize("NFC", candidate)
    peers = [unicodedata.normalize("NFC", p) for p in peers]
    recorded = _recorded(flag, len(candidate))
    if recorded is not None:
        return Highlights(recorded, [[] for _ in peers])
    finder = _FINDERS.get(flag.rule, _quoted_in_candidate)
    return finder(flag.detail, candidate, peers)


def _recorded(flag: Flag, size: int) -> list[Span] | None:
    """Spans the flag carries itself (the checks' own record, once they keep one), clipped to the text."""
    raw: Any = getattr(flag, "spans", None) or None  # no spans recorded (a result stored before they were)
    if raw is None:
        one = getattr(flag, "span", None)
        raw = None if one is None else [one]
    if raw is None:
        return None
    out: list[Span] = []
    for item in raw:
        start, end = (item.start, item.end) if hasattr(item, "start") else (item[0], item[1])
        start, end = max(0, int(start)), min(size, int(end))
        if start < end:
            out.append((start, end))
    return sorted(out)


def _none(peers: Sequence[str]) -> list[list[Span]]:
    return [[] for _ in peers]


def _find_all(text: str, needle: str) -> list[Span]:
    """Every occurrence of a quoted piece (clipped quotes end in "..."), case-insensitively."""
    needle = needle.strip()
    if needle.endswith("..."):
        needle = needle[:-3].rstrip()
    if len(needle) < 2:
        return []
    low, n = text.lower(), needle.lower()
    out, at = [], low.find(n)
    while at >= 0:
        out.append((at, at + len(n)))
        at = low.find(n, at + len(n))
    return out


def _quotes(detail: str) -> list[str]:
    return [m.group(1) or m.group(2) for m in _QUOTED.finditer(detail)]


def _quoted_in_candidate(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    """The pieces of the candidate the wording quotes (a clause, a JSON fragment, an echoed instruction)."""
    spans = sorted({s for q in _quotes(detail) for s in _find_all(candidate, q)})
    return Highlights(spans, _none(peers))


def _said_labels(detail: str) -> list[str]:
    """The values after "candidate says", as the wording names them ("three", "Sāriputta", "a list of three")."""
    m = _SAYS.search(detail)
    return [x.strip() for x in _LABEL.findall(m.group(1))] if m else []


def _numbers(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    said = set(_said_labels(detail))
    found = [
        (s, e)
        for kind, value, s, e in default_checker().extractor.english_marks(candidate)
        if kind == "number" and number_word(int(value)) in said
    ]
    return Highlights(sorted(set(found)), _none(peers))


def _names(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    # a name label is its lexicon display form, capitalised; a Pali-looking unknown name drops its last vowel
    said = [fold(x) for x in _said_labels(detail)]
    found = []
    for t in word_tokens(candidate):
        f = fold(t.text)
        if t.capital and any(f == x or (len(x) >= 4 and f.startswith(x[: max(4, len(x) - 1)])) for x in said):
            found.append((t.start, t.start + len(t.text)))
    return Highlights(found, _none(peers))


def _list_sizes(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    said = set(_said_labels(detail))
    found = [
        (s, e)
        for kind, value, s, e in default_checker().extractor.english_marks(candidate)
        if kind == "list" and f"a list of {number_word(int(value))}" in said
    ]
    return Highlights(sorted(set(found)), _none(peers))


def _terms(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    """A swap quotes the peers' rendering and the candidate's ("says “craving”"): the candidate's word, by stem."""
    quoted = _quotes(detail)
    if len(quoted) >= 2:
        stem = quoted[-1]
        found = [(t.start, t.start + len(t.text)) for t in word_tokens(candidate) if en_stem(t.lower) == stem]
        return Highlights(found, _none(peers))
    return _quoted_in_candidate(detail, candidate, peers)


def _negation(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    """The clause the located comparison quotes; a passage-level count names no place, so nothing is marked."""
    return _quoted_in_candidate(detail, candidate, peers)


def _omission(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    """Omitted content is a peer's clause the candidate does not cover: marked in the peers that have it."""
    quoted = _quotes(detail)
    return Highlights([], [sorted({s for q in quoted for s in _find_all(p, q)}) for p in peers])


def _whole(detail: str, candidate: str, peers: Sequence[str]) -> Highlights:
    stripped = candidate.strip()
    if not stripped:
        return Highlights([], _none(peers))
    start = candidate.index(stripped)
    return Highlights([(start, start + len(stripped))], _none(peers))


_FINDERS: dict[str, Callable[[str, str, Sequence[str]], Highlights]] = {
    "critical.number": _numbers,
    "critical.name": _names,
    "critical.list_size": _list_sizes,
    "critical.term": _terms,
    "critical.negation": _negation,
    "critical.added_content": _quoted_in_candidate,
    "critical.omission": _omission,
    "source_copy": _whole,
    "wrong_script": _whole,
    "repetition_loop": _whole,
}
