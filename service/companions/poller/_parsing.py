"""Strict parsing of a Poller judge's answer: per dimension a score and a reason, or a recorded parse failure.

The answer is read as JSON when it is (or contains, in a code fence or between its first "{" and last "}") a JSON
object or list naming dimensions; otherwise line by line, where each line is a markdown table row, a role line, a
score line, a dimension heading or the "Score:"/"Reason:" line under such a heading. Labels are compared after
NFKC, casefolding and dropping everything but letters and digits, so "**Thought & Emotion**", "thought_and_emotion"
and "思想情感" all name a dimension (the labels and aliases of ``_dimensions``); a label with a parenthesis counts
by the text outside or inside it ("内容（Content）"). NFKC makes full-width digits, colons, slashes and percent
signs ordinary ones ("８５", "：", "／", "％").

| what the judge wrote after a dimension's label            | result for that dimension                      |
|-----------------------------------------------------------|------------------------------------------------|
| a number 0-100, integer or decimal ("85", "85.5", "0")     | that score                                     |
|   optionally followed by "分", "points", "pts", "%", "/100" | ("85分", "85 points", "85%", "85/100")        |
| a number above 100 or a negative one ("101", "-1")        | ``out_of_range``                               |
| a number over another scale ("8/10", "4/5")               | ``wrong_scale`` (never rescaled)               |
| a fraction strictly between 0 and 1 ("0.55", "0.9/100")   | ``fraction_scale``: a 0-1 scale, never taken   |
|                                                           | as 0.55 points or rescaled to 55               |
| a range or two numbers ("80-85", "80~85", "80 to 85")     | ``ambiguous``                                  |
| a table cell or JSON value that is not a number           | ``not_a_number`` ("N/A", "八十五", "٨٥", true)  |
| nothing (no line, row or key; or a label line without a   | ``missing``                                    |
| number and no "Score:" line under it, "Content: N/A")     |                                                |
| the dimension twice with the same score                   | that score (the first reason)                  |
| the dimension twice with anything else                    | ``conflicting`` (e.g. "85 vs 90")              |

A label line whose text does not start with a number ("Content: the reader sees ...") is a heading: the next
"Score:" / "评分：" / "得分：" / "分数：" line gives the score and a following "Reason:" / "理由：" line the reason.
A score line with no reason after its score ("Content: 85") takes the paragraph that follows it as its reason
(the layout of the papers' example answers), up to a blank line or the next dimension.
Lines that name no dimension (prose, "Overall: 84", dimensions that were not asked for) are ignored.

The whole answer is unusable (``error`` set; the judge is asked again with the temperature raised one step) when
it is empty, was cut off (finish_reason "length": the last number may be cut too), or yields no score at all.
The declared role is the first line labelled "Role:" / "角色：" (or a JSON key "role"); whether it names the
persona's author is ``names_author`` (whole words or, for Chinese, characters in a row).
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from typing import Any, Literal

import msgspec

from service.companions.poller._dimensions import DIMENSIONS, Dimension
from service.companions.poller._persona import Persona, names_author
from service.companions.poller._prompts import ROLE_LABELS
from service.core.judges.llm import readable

__all__ = [
    "AnswerError",
    "DeclaredRole",
    "DimensionError",
    "DimensionFailure",
    "DimensionResult",
    "DimensionScore",
    "PollerParse",
    "parse_poller_answer",
]

DimensionError = Literal[
    "missing", "conflicting", "out_of_range", "wrong_scale", "fraction_scale", "ambiguous", "not_a_number"
]
AnswerError = Literal["empty", "truncated", "no_scores"]
AnswerFormat = Literal["json", "lines"]


class DimensionScore(msgspec.Struct, tag="scored", tag_field="status", forbid_unknown_fields=True, frozen=True):
    """A dimension the judge scored: 0-100 and its reason (None when the judge gave none)."""

    dimension: str
    score: float
    reason: str | None = None


class DimensionFailure(
    msgspec.Struct, tag="parse_failure", tag_field="status", forbid_unknown_fields=True, frozen=True
):
    """A dimension without a usable score, and why; ``detail`` quotes what the judge wrote, if anything."""

    dimension: str
    error: DimensionError
    detail: str | None = None


DimensionResult = DimensionScore | DimensionFailure


class DeclaredRole(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """The role the judge stated; ``names_author`` is None without a persona, ``before_scores`` None for JSON."""

    text: str
    names_author: bool | None
    before_scores: bool | None


class PollerParse(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """What one answer gave: ``error`` set means unusable as a whole (then ``dimensions`` may be empty)."""

    error: AnswerError | None
    format: AnswerFormat | None
    dimensions: list[DimensionResult]
    role: DeclaredRole | None

    @property
    def scores(self) -> dict[str, float]:
        return {d.dimension: d.score for d in self.dimensions if isinstance(d, DimensionScore)}


# --- folding -------------------------------------------------------------------------------------------------------

_MARKUP = frozenset("*`")


def _fold_line(line: str) -> tuple[str, list[int]]:
    """NFKC per character with markup dropped, and for every output character its index in ``line``."""
    out: list[str] = []
    origin: list[int] = []
    for i, ch in enumerate(line):
        if ch in _MARKUP:
            continue
        for c in unicodedata.normalize("NFKC", ch):
            out.append(c)
            origin.append(i)
    return "".join(out), origin


def _key(text: str) -> str:
    """A label compared by its letters and digits only (NFKC, casefolded)."""
    folded = unicodedata.normalize("NFKC", text).casefold()
    return "".join(ch for ch in folded if unicodedata.category(ch)[0] in "LN")


_SCORE_SUFFIX = ("score", "rating", "评分", "得分", "分数")


def _alias_table(dimensions: Sequence[Dimension]) -> dict[str, str]:
    table: dict[str, str] = {}
    for d in dimensions:
        for label in (d.name, d.label_en, d.label_zh, *d.aliases):
            table[_key(label)] = d.name
    return table


_ALL_ALIASES = _alias_table(DIMENSIONS)
_ROLE_KEYS = frozenset(_key(label) for label in ROLE_LABELS)
_SCORE_KEYS = frozenset(_key(w) for w in ("score", "rating", "评分", "得分", "分数", "分", "value"))
_REASON_KEYS = frozenset(
    _key(w)
    for w in ("reason", "reasoning", "justification", "explanation", "comment", "rationale", "理由", "说明", "评语")
)
_DIMENSION_KEYS = frozenset(_key(w) for w in ("dimension", "name", "aspect", "criterion", "维度", "项目", "方面"))
_CONTAINER_KEYS = frozenset(_key(w) for w in ("scores", "dimensions", "evaluation", "ratings", "评分", "维度", "打分"))

_PAREN = re.compile(r"[(\[（【](.*?)[)\]）】]")


def _label_dimension(label: str) -> tuple[str | None, str | None]:
    """The known dimension a label names (any dimension, asked for or not) and a score inside its parenthesis."""
    candidates = [label, _PAREN.sub(" ", label), *_PAREN.findall(label)]
    names: set[str] = set()
    inner_score: str | None = None
    for candidate in candidates:
        key = _key(candidate)
        for suffix in _SCORE_SUFFIX:
            if key.endswith(suffix) and key[: -len(suffix)] in _ALL_ALIASES:
                key = key[: -len(suffix)]
        if key in _ALL_ALIASES:
            names.add(_ALL_ALIASES[key])
    for inner in _PAREN.findall(label):
        if _NUMBER.match(inner.strip()):
            inner_score = inner
    return (names.pop() if len(names) == 1 else None), inner_score


# --- values --------------------------------------------------------------------------------------------------------

_NUMBER = re.compile(
    r"(?P<sign>[-−](?=[0-9]))?(?P<num>[0-9]+(?:\.[0-9]+)?)"
    r"(?P<unit>\s*(?:/\s*(?P<den>[0-9]+(?:\.[0-9]+)?)|分|points?(?![a-z])|pts?(?![a-z])|%))?",
    re.IGNORECASE,
)
_RANGE_TAIL = re.compile(r"\s*(?:[-–—~～]|至|到|to\b|or\b|或)\s*[0-9]+(?:\.[0-9]+)?", re.IGNORECASE)
_REASON_LEAD = re.compile(r"^[\s\-–—:=|,;.。，；、)）\]]*(?:(?:reason|理由|justification)\s*[:=]\s*)?", re.IGNORECASE)


class _Value(msgspec.Struct):
    score: float | None
    error: DimensionError | None
    end: int  # offset in the text just after the score token


def _read_value(text: str, *, whole: bool) -> _Value | None:
    """The score token at the start of ``text``; None when no number starts it.

    ``whole``: the text must hold the score alone (a table cell, a JSON value); anything after it makes it
    ``not_a_number`` (or ``ambiguous`` for a range).
    """
    stripped = text.lstrip()
    offset = len(text) - len(stripped)
    match = _NUMBER.match(stripped)
    if match is None:
        return _Value(None, "not_a_number", 0) if whole else None
    end = offset + match.end()
    rest = stripped[match.end() :]
    second = _RANGE_TAIL.match(rest)
    if second is not None:
        return _Value(None, "ambiguous", end + second.end())
    if whole and rest.strip(" .。"):
        return _Value(None, "not_a_number", end)
    value = float(match.group("num"))
    den = match.group("den")
    if den is not None and float(den) != 100.0:
        return _Value(None, "wrong_scale", end)
    if match.group("sign") or value > 100.0:
        return _Value(None, "out_of_range", end)
    if 0.0 < value < 1.0:
        return _Value(None, "fraction_scale", end)
    return _Value(value, None, end)


class _Entry(msgspec.Struct):
    dimension: str
    score: float | None
    error: DimensionError | None
    detail: str
    reason: str | None
    line: int


def _entry(dimension: str, text: str, *, whole: bool, line: int, reason: str | None = None) -> _Entry | None:
    value = _read_value(text, whole=whole)
    if value is None:
        return None
    detail = (text.strip() if whole else text[: value.end].strip())[:80]
    return _Entry(dimension, value.score, value.error, detail, reason, line)


# --- JSON ----------------------------------------------------------------------------------------------------------

_CODE_FENCE = re.compile(r"```(?:json|JSON)?\s*\n(.*?)\n\s*```", re.DOTALL)


def _pairs(pairs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    return pairs  # keep every key, duplicates included (a dimension given twice must not silently win)


def _json_candidates(text: str) -> list[Any]:
    found: list[Any] = []
    chunks = [text.strip(), *_CODE_FENCE.findall(text)]
    first, last = text.find("{"), text.rfind("}")
    if 0 <= first < last:
        chunks.append(text[first : last + 1])
    for chunk in chunks:
        try:
            found.append(json.loads(chunk, object_pairs_hook=_pairs))
        except ValueError:
            continue
    return found


def _json_value(dimension: str, value: Any, line: int) -> _Entry:
    reason: str | None = None
    if isinstance(value, list) and value and all(isinstance(p, tuple) for p in value):
        score: Any = None
        for k, v in value:
            if _key(k) in _SCORE_KEYS and score is None:
                score = v
            elif _key(k) in _REASON_KEYS and isinstance(v, str):
                reason = v.strip() or None
        value = score
    if isinstance(value, int | float) and not isinstance(value, bool):
        value = repr(value) if isinstance(value, float) else str(value)
    if not isinstance(value, str):
        return _Entry(dimension, None, "not_a_number", json.dumps(value, ensure_ascii=False)[:80], reason, line)
    entry = _entry(dimension, unicodedata.normalize("NFKC", value), whole=True, line=line, reason=reason)
    assert entry is not None  # whole=True always reads something
    return entry


def _is_object(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(p, tuple) for p in value)


def _from_json(data: Any, role_out: list[str]) -> list[_Entry]:
    """Entries of a decoded answer (objects arrive as lists of key/value pairs, see ``_pairs``)."""
    entries: list[_Entry] = []
    items: list[tuple[str, Any]] = []
    if _is_object(data):
        container: Any = None
        for k, v in data:
            key = _key(k)
            if key in _ROLE_KEYS and isinstance(v, str) and not role_out:
                role_out.append(v.strip())
            elif key in _CONTAINER_KEYS and container is None:
                container = v
        if container is None:
            items = [(k, v) for k, v in data if _key(k) not in _ROLE_KEYS]
        else:
            data = container
    if not items and isinstance(data, list):
        if _is_object(data):
            items = list(data)
        else:  # a list of {"dimension": ..., "score": ..., "reason": ...}
            for element in data:
                if not _is_object(element):
                    continue
                name = next((v for k, v in element if _key(k) in _DIMENSION_KEYS and isinstance(v, str)), None)
                if name is not None:
                    items.append((name, [(k, v) for k, v in element if _key(k) not in _DIMENSION_KEYS]))
    for line, (label, value) in enumerate(items):
        dimension, _ = _label_dimension(label)
        if dimension is not None:
            entries.append(_json_value(dimension, value, line))
    return entries


# --- lines and tables ----------------------------------------------------------------------------------------------

_PREFIX = re.compile(r"^\s*(?:(?:[-+•>#]+|\(?[0-9]{1,2}[.)、]|[一二三四五六七八九十]+[、.])\s*)*")
_LABELLED = re.compile(r"^(?P<label>[^:=|]{1,80}?)\s*(?::|=|\s[-–—]\s|[-–—](?=\s*[0-9]))\s*(?P<rest>.*)$")
_TABLE_SEPARATOR = re.compile(r"^[\s|:\-]+$")


class _Table(msgspec.Struct):
    dimension: int | None = None
    score: int | None = None
    reason: int | None = None


def _cells(line: str) -> list[str]:
    inner = line.strip()
    inner = inner.removeprefix("|").removesuffix("|")
    return [c.strip() for c in inner.split("|")]


def _table_row(cells: list[str], table: _Table, line: int) -> tuple[_Entry | None, _Table]:
    folded = [_fold_line(c)[0].strip() for c in cells]
    named = [(_label_dimension(c)[0]) for c in folded]
    keys = [_key(c) for c in folded]
    if not any(named):
        header = _Table()
        for i, k in enumerate(keys):
            if k in _DIMENSION_KEYS and header.dimension is None:
                header.dimension = i
            elif k in _SCORE_KEYS and header.score is None:
                header.score = i
            elif k in _REASON_KEYS and header.reason is None:
                header.reason = i
        return None, (header if header.score is not None or header.dimension is not None else table)
    if table.dimension is not None and table.dimension < len(named) and named[table.dimension]:
        d = table.dimension
    else:
        d = next(i for i, n in enumerate(named) if n)
    dimension = named[d]
    assert dimension is not None
    s = table.score if table.score is not None else d + 1
    r = table.reason if table.reason is not None else s + 1
    if s >= len(cells) or s == d:
        return _Entry(dimension, None, "not_a_number", "", None, line), table
    reason = (cells[r].strip("*` ") or None) if r < len(cells) and r not in (d, s) else None
    return _entry(dimension, folded[s], whole=True, line=line, reason=reason), table


def _labelled(raw_line: str) -> tuple[str, str, int, list[int]] | None:
    """(label, rest, offset of rest in the folded line, origin map) of a line, numbering and bullets dropped."""
    folded, origin = _fold_line(raw_line)
    prefix = _PREFIX.match(folded)
    start = prefix.end() if prefix else 0
    body = folded[start:]
    if not body.strip():
        return None
    match = _LABELLED.match(body)
    if match is None:
        return body, "", len(folded), origin
    return match.group("label"), match.group("rest"), start + match.start("rest"), origin


def _original(raw_line: str, origin: list[int], at: int) -> str | None:
    if at >= len(origin):
        return None
    return raw_line[origin[at] :].strip().rstrip("*` ").strip() or None


def _find_role(text: str) -> tuple[str, int] | None:
    """The first line labelled as the judge's role (its text and line number)."""
    for number, raw_line in enumerate(text.splitlines()):
        parts = _labelled(raw_line)
        if parts is not None and parts[1].strip() and _key(parts[0]) in _ROLE_KEYS:
            role = _original(raw_line, parts[3], parts[2])
            if role:
                return role, number
    return None


def _from_lines(text: str) -> list[_Entry]:
    entries: list[_Entry] = []
    table = _Table()
    heading: str | None = None  # a dimension named by a line without a score, waiting for its "Score:" line
    awaiting: _Entry | None = None  # a score without a reason: the paragraph after it gives the reason
    reason_lines: list[str] = []

    def close_reason() -> None:
        nonlocal awaiting
        if awaiting is not None and reason_lines:
            awaiting.reason = " ".join(reason_lines)
            awaiting = None
        reason_lines.clear()

    for number, raw_line in enumerate(text.splitlines()):
        if raw_line.count("|") >= 2:
            if _TABLE_SEPARATOR.match(raw_line):
                continue
            close_reason()
            awaiting = None
            entry, table = _table_row(_cells(raw_line), table, number)
            if entry is not None:
                entries.append(entry)
            heading = None
            continue
        parts = _labelled(raw_line)
        if parts is None:
            if reason_lines:  # a blank line ends the reason's paragraph
                close_reason()
            continue
        label, rest, rest_at, origin = parts
        label_key = _key(label)
        dimension, inner = _label_dimension(label)
        if dimension is not None:
            close_reason()
            if inner is not None:
                entry = _entry(dimension, inner, whole=True, line=number)
                heading = None
            else:
                entry = _entry(dimension, rest, whole=False, line=number)
                heading = dimension if entry is None else None
            awaiting = None
            if entry is not None:
                entry.reason = _reason_after(raw_line, origin, rest_at, rest)
                entries.append(entry)
                awaiting = entry if entry.reason is None else None
            continue
        if label_key in _SCORE_KEYS and heading is not None and rest_at < len(origin):
            close_reason()
            entry = _entry(heading, rest, whole=False, line=number)
            if entry is None:
                entry = _Entry(heading, None, "not_a_number", rest.strip()[:80], None, number)
            entry.reason = _reason_after(raw_line, origin, rest_at, rest)
            entries.append(entry)
            awaiting = entry if entry.reason is None else None
            heading = None
        elif label_key in _REASON_KEYS and entries and entries[-1].reason is None:
            close_reason()
            entries[-1].reason = _original(raw_line, origin, rest_at)
            awaiting = None
        elif awaiting is not None and label_key not in _ROLE_KEYS:
            # the layout of the papers' example answers: "Content: 85", then the reason as its own paragraph
            line = raw_line.strip().strip("*` ").strip()
            if line:
                reason_lines.append(line)
    close_reason()
    return entries


def _reason_after(raw_line: str, origin: list[int], rest_at: int, rest: str) -> str | None:
    """The judge's own words after the score token (taken from the original line, not the folded one)."""
    value = _read_value(rest, whole=False)
    end = value.end if value is not None else 0
    lead = _REASON_LEAD.match(rest[end:])
    return _original(raw_line, origin, rest_at + end + (lead.end() if lead else 0))


# --- the answer ----------------------------------------------------------------------------------------------------


def _resolve(dimension: Dimension, entries: list[_Entry]) -> DimensionResult:
    mine = [e for e in entries if e.dimension == dimension.name]
    if not mine:
        return DimensionFailure(dimension.name, "missing")
    scores = {e.score for e in mine}
    if len(scores) > 1 or (len(mine) > 1 and None in scores):
        return DimensionFailure(dimension.name, "conflicting", " vs ".join(e.detail for e in mine)[:200])
    first = mine[0]
    if first.score is None:
        return DimensionFailure(dimension.name, first.error or "not_a_number", first.detail or None)
    reason = next((e.reason for e in mine if e.reason), None)
    return DimensionScore(dimension.name, first.score, reason)


def parse_poller_answer(
    text: str | None,
    finish_reason: str | None = "stop",
    *,
    dimensions: Sequence[Dimension],
    persona: Persona | None = None,
) -> PollerParse:
    """Scores, failures and the declared role of one answer; see the table in the module docstring."""
    text, unread = readable(text, finish_reason)
    if text is None:
        return PollerParse(unread, None, [], None)
    answer_format: AnswerFormat = "json"
    entries: list[_Entry] = []
    json_role: list[str] = []
    for data in _json_candidates(text):
        json_role = []
        entries = _from_json(data, json_role)
        if entries:
            break
    if not entries:
        answer_format = "lines"
        entries = _from_lines(text)
    role_text: str | None = json_role[0] if entries and answer_format == "json" and json_role else None
    before: bool | None = None
    if role_text is None:
        found = _find_role(text)
        if found is not None:
            role_text, role_line = found
            if answer_format == "lines":
                before = not entries or role_line < min(e.line for e in entries)
    results = [_resolve(d, entries) for d in dimensions]
    role = None
    if role_text:
        role = DeclaredRole(role_text, None if persona is None else names_author(role_text, persona), before)
    error: AnswerError | None = None if any(isinstance(r, DimensionScore) for r in results) else "no_scores"
    return PollerParse(error, answer_format if entries else None, results, role)
