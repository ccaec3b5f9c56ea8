"""Hard flags of one candidate: rules that force a candidate to review on its own (no peers or embeddings needed)."""

from __future__ import annotations

import re
import unicodedata
import zlib
from collections import Counter

from service.core.signals.copying import copy_stats
from service.core.signals.length_model import letter_count
from service.core.types import Flag

__all__ = ["candidate_flags"]

# Hard-flag thresholds. On the PaliBench dev half (7,630 candidates) the largest source-token share of a real
# translation is 0.21 and the longest run of source tokens is 13 (an untranslated Pali formula, a true partial copy).
_COPY_SHARE = 0.6
_COPY_RUN = 8
_MIN_LETTERS_SCRIPT = 10
_SCRIPT_SHARE = 0.5
# A generation loop compresses far better than its source (dev: loop 0.07, next lowest 0.48 of the source's ratio).
_LOOP_RELATIVE_ZLIB = 0.3
_LOOP_MIN_CHARS = 200

# Languages whose output should be in one script (the first word of the Unicode character name).
_EXPECTED_SCRIPTS: dict[str, frozenset[str]] = {
    **{lang: frozenset({"LATIN"}) for lang in ("en", "de", "fr", "es", "it", "pt", "nl", "pl", "cs", "vi", "id")},
    "ru": frozenset({"CYRILLIC"}),
    "uk": frozenset({"CYRILLIC"}),
    "zh": frozenset({"CJK"}),
    "ja": frozenset({"CJK", "HIRAGANA", "KATAKANA"}),
    "ko": frozenset({"HANGUL"}),
    "hi": frozenset({"DEVANAGARI"}),
    "th": frozenset({"THAI"}),
    "my": frozenset({"MYANMAR"}),
    "si": frozenset({"SINHALA"}),
    "bo": frozenset({"TIBETAN"}),
    "te": frozenset({"TELUGU"}),
}

_JSON_DEBRIS = (
    re.compile(r"^\s*[\{\[]\s*\""),  # output starts like a JSON object or array of strings
    re.compile(r"\"\s*:\s*[\"\{\[]"),  # a key-value pair
    re.compile(r"\"?\b[a-z]{2,6}\d+(?:\.\d+)*:\d+(?:\.\d+)*\b\"?\s*:"),  # a bilara segment key used as a key
    re.compile(r"```"),  # a markdown code fence
    re.compile(r"\"\s*\}\s*$"),  # ends like a JSON object
)
_PROMPT_ECHO = re.compile(
    r"translate the following|return a json|output only the json|here is the (?:english )?translation|"
    r"as an ai\b|i cannot (?:translate|help)|i'm sorry, but|sure[,!] here",
    re.IGNORECASE,
)


def _script_of(ch: str) -> str:
    try:
        return unicodedata.name(ch).split(" ", 1)[0]
    except ValueError:
        return "UNKNOWN"


def _zlib_ratio(text: str) -> float:
    raw = text.encode("utf-8")
    return len(zlib.compress(raw, 9)) / max(1, len(raw))


def candidate_flags(source: str, candidate: str, *, source_lang: str = "pli", target_lang: str = "en") -> list[Flag]:
    """Hard flags of one candidate: empty, copied source (whole or partial), wrong script, JSON debris, prompt echo,
    generation loop, unbalanced brackets. Candidate-only rules; no peers or embeddings needed."""
    flags: list[Flag] = []
    letters = letter_count(candidate)
    if letters == 0:
        return [Flag(rule="empty_output", severity="critical", detail="the candidate has no letters")]

    share, run, n_tok = copy_stats(source, candidate, source_lang)
    if share >= _COPY_SHARE and n_tok >= 3:
        flags.append(
            Flag(
                rule="source_copy",
                severity="critical",
                detail=f"{share:.0%} of the candidate's {n_tok} words are words of the source text",
            )
        )
    elif run >= _COPY_RUN:
        flags.append(
            Flag(
                rule="partial_source_copy",
                severity="major",
                detail=f"{run} consecutive candidate words are copied from the source text",
            )
        )

    expected = _EXPECTED_SCRIPTS.get(target_lang.lower())
    if expected is not None and letters >= _MIN_LETTERS_SCRIPT:
        scripts = Counter(_script_of(ch) for ch in candidate if ch.isalpha())
        total = sum(scripts.values())
        in_script = sum(c for s, c in scripts.items() if s in expected)
        if total and in_script / total < _SCRIPT_SHARE:
            main_script = scripts.most_common(1)[0][0].lower()
            flags.append(
                Flag(
                    rule="wrong_script",
                    severity="critical",
                    detail=f"only {in_script / total:.0%} of letters are in the expected script; mostly {main_script}",
                )
            )

    for pattern in _JSON_DEBRIS:
        m = pattern.search(candidate)
        if m:
            flags.append(Flag(rule="json_debris", severity="major", detail=f"JSON or markup residue: {m.group(0)!r}"))
            break

    m = _PROMPT_ECHO.search(candidate)
    if m:
        flags.append(Flag(rule="prompt_echo", severity="major", detail=f"instruction or chat text: {m.group(0)!r}"))

    if len(candidate) >= _LOOP_MIN_CHARS and source.strip():
        rel = _zlib_ratio(candidate) / _zlib_ratio(source)
        if rel < _LOOP_RELATIVE_ZLIB:
            flags.append(
                Flag(
                    rule="repetition_loop",
                    severity="major",
                    detail=f"the candidate compresses {1 / rel:.1f}x better than its source: a repeated loop",
                )
            )

    unbalanced = [f"{o}{c}" for o, c in ("()", "[]", "{}") if candidate.count(o) != candidate.count(c)]
    unbalanced = [p for p in unbalanced if source.count(p[0]) == source.count(p[1])]
    if unbalanced:
        flags.append(Flag(rule="unbalanced_brackets", severity="minor", detail=f"unbalanced {' '.join(unbalanced)}"))
    return flags
