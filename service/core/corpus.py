"""Corpus ingest: bilara segment files or plain JSONL into ordered passages, with the research's filter rules."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from service.core.text import get_normaliser
from service.platform.errors import InputError

__all__ = [
    "FilterRules",
    "Passage",
    "Profile",
    "apply_filters",
    "group_segments",
    "load_bilara",
    "load_jsonl",
    "natural_key",
    "passage_id_of",
]

_RUN_RE = re.compile(r"(\d+)")


def natural_key(key: str) -> tuple[object, ...]:
    """Sort key that orders the numbers inside a key numerically: ``mn1:1.10`` after ``mn1:1.9``, ``an1.10`` after
    ``an1.2``."""
    parts: list[object] = []
    for i, run in enumerate(_RUN_RE.split(key)):
        if i % 2:
            parts.append((1, int(run), ""))
        elif run:
            parts.append((0, 0, run))
    return tuple(parts)


def passage_id_of(segment_key: str) -> str:
    """The passage a segment belongs to: the key with its last dot-component (after the colon) removed."""
    text_id, sep, seg = segment_key.partition(":")
    if not sep:
        return segment_key
    head, dot, _ = seg.rpartition(".")
    return f"{text_id}:{head}" if dot else segment_key


def _is_title(passage_id: str) -> bool:
    _, _, seg = passage_id.partition(":")
    return seg == "0" or seg.startswith("0.")


@dataclass
class Passage:
    """One source passage: its segments in order and, when known, the aligned translation."""

    id: str
    text: str
    lang: str
    segments: list[str] = field(default_factory=list)
    translation: str | None = None
    # segments of this passage whose key the translation has (None = no translation directory given)
    translated_segments: int | None = None


def group_segments(segments: dict[str, str], *, drop_titles: bool = True) -> dict[str, list[str]]:
    """Passage id -> its segment keys in true segment order (keys with empty text are kept in order, too)."""
    grouped: dict[str, list[str]] = {}
    for key in segments:
        pid = passage_id_of(key)
        if drop_titles and _is_title(pid):
            continue
        grouped.setdefault(pid, []).append(key)
    for keys in grouped.values():
        keys.sort(key=natural_key)
    return dict(sorted(grouped.items(), key=lambda kv: natural_key(kv[0])))


def _read_segment_files(files: Iterable[Path]) -> dict[str, str]:
    merged: dict[str, str] = {}
    for path in files:
        with path.open(encoding="utf-8") as fh:
            data = json.load(fh)
        if not isinstance(data, dict):
            raise InputError(f"{path}: a bilara file maps segment keys to text")
        merged.update({str(k): str(v) for k, v in data.items()})
    return merged


def _join(texts: Iterable[str]) -> str:
    return " ".join(t.strip() for t in texts if t and t.strip())


def load_bilara(
    bilara_dir: str | Path,
    *,
    subdir: str = "sutta",
    lang: str = "pli",
    edition: str = "ms",
    translation_dir: str | Path | None = None,
) -> list[Passage]:
    """Read ``root/<lang>/<edition>/<subdir>/**`` into passages in segment order; titles dropped.

    ``translation_dir`` (e.g. ``translation/en/sujato``) attaches the aligned translation and its coverage.
    """
    root = Path(bilara_dir) / "root" / lang / edition
    if subdir:
        root = root / subdir
    files = sorted(root.rglob(f"*_root-{lang}-{edition}.json"))
    if not files:
        raise InputError(f"no bilara root files under {root}")
    segments = _read_segment_files(files)
    translations: dict[str, str] | None = None
    if translation_dir is not None:
        translations = _read_segment_files(sorted(Path(translation_dir).rglob("*_translation-*.json")))
    passages: list[Passage] = []
    for pid, keys in group_segments(segments).items():
        text = _join(segments[k] for k in keys)
        p = Passage(id=pid, text=text, lang=lang, segments=keys)
        if translations is not None:
            # a key present in the translation file counts as covered even when its text is empty (bilara leaves
            # some segments deliberately blank); this reproduces the research's 3,755 incomplete passages exactly
            p.translated_segments = sum(1 for k in keys if k in translations)
            p.translation = _join(translations.get(k, "") for k in keys)
        passages.append(p)
    return passages


def load_jsonl(path: str | Path, *, default_lang: str | None = None) -> list[Passage]:
    """Read a plain corpus, one ``{"id", "text", "lang"}`` object per line, in file order."""
    passages: list[Passage] = []
    seen: set[str] = set()
    with Path(path).open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                pid, text = str(row["id"]), str(row["text"])
                lang = str(row.get("lang") or default_lang or "")
            except (ValueError, KeyError, TypeError) as exc:
                raise InputError(f"{path}:{n}: expected an object with id, text and lang") from exc
            if not lang:
                raise InputError(f"{path}:{n}: no lang given")
            if pid in seen:
                raise InputError(f"{path}:{n}: duplicate id {pid!r}")
            seen.add(pid)
            passages.append(Passage(id=pid, text=text, lang=get_normaliser(lang).lang, segments=[pid]))
    return passages


@dataclass(frozen=True)
class FilterRules:
    """The research's eligibility rules; the ratio rules apply only when a translation is attached."""

    min_content_tokens: int = 10
    require_full_coverage: bool = True
    min_char_ratio: float = 0.5
    max_char_ratio: float = 2.5


@dataclass
class Profile:
    """How many passages each rule removed (non-exclusive) and how many were kept."""

    total: int
    removed: dict[str, int]
    kept: int

    def table(self) -> str:
        width = max(len(k) for k in [*self.removed, "passages"]) + 2
        lines = [f"{'passages':<{width}}{self.total:>8}"]
        lines += [f"{rule:<{width}}{n:>8}  ({n / max(self.total, 1):.1%})" for rule, n in self.removed.items()]
        lines.append(f"{'kept':<{width}}{self.kept:>8}  ({self.kept / max(self.total, 1):.1%})")
        return "\n".join(lines)


def exclusion_reasons(p: Passage, rules: FilterRules) -> list[str]:
    """The rules a passage fails (empty = eligible)."""
    reasons: list[str] = []
    if len(get_normaliser(p.lang).content_tokens(p.text)) < rules.min_content_tokens:
        reasons.append("too_few_content_tokens")
    if p.translated_segments is not None:
        if p.translated_segments == 0:
            reasons.append("no_translation")
            return reasons
        if rules.require_full_coverage and p.translated_segments < len(p.segments):
            reasons.append("incomplete_translation")
        ratio = len(p.translation or "") / max(len(p.text), 1)
        if not rules.min_char_ratio <= ratio <= rules.max_char_ratio:
            reasons.append("char_ratio_out_of_bounds")
    return reasons


def apply_filters(passages: list[Passage], rules: FilterRules) -> tuple[list[list[str]], Profile]:
    """Per passage its failed rules, and the profile table of the whole corpus."""
    reasons = [exclusion_reasons(p, rules) for p in passages]
    names = ["no_translation", "too_few_content_tokens", "incomplete_translation", "char_ratio_out_of_bounds"]
    removed = {n: sum(n in r for r in reasons) for n in names}
    if passages and passages[0].translated_segments is None:
        removed = {n: v for n, v in removed.items() if n == "too_few_content_tokens"}
    kept = sum(1 for r in reasons if not r)
    return reasons, Profile(total=len(passages), removed=removed, kept=kept)


def iter_texts(passages: list[Passage]) -> Iterator[str]:
    return (p.text for p in passages)
