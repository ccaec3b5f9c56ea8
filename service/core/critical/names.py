"""Name spellings: a candidate's name against the source's, compared on a transliterated, diacritics-folded form."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["canon", "edit_distance", "nearest", "spelling_budget"]


def canon(folded: str) -> str:
    """A folded name in one spelling of the equivalences Pali and English editions share: b and v (bārāṇasī,
    Vārāṇasī), ss and sv (Sarassatī, Sarasvatī), the stem's final -in and the vocative's -i (Udāyin, udāyi)."""
    s = folded.replace("sv", "ss").replace("b", "v")
    return s[:-1] if s.endswith("in") and len(s) > 4 else s


def edit_distance(a: str, b: str, limit: int = 3) -> int:
    """Levenshtein distance of ``a`` and ``b``, or ``limit`` + 1 as soon as it exceeds ``limit``."""
    if abs(len(a) - len(b)) > limit:
        return limit + 1
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        if min(cur) > limit:
            return limit + 1
        prev = cur
    return prev[-1]


def spelling_budget(key: str) -> int:
    """Letters a spelling may differ by and still be the same name: one in a short name, two in a long one."""
    return 1 if len(key) <= 6 else 2


def nearest(key: str, forms: Iterable[str]) -> tuple[str, int] | None:
    """The form (canonical, stem-like) a canonical name key is a spelling variant of, with the distance: same first
    letter, within ``spelling_budget``; None when no form is that close."""
    budget = spelling_budget(key)
    best: tuple[str, int] | None = None
    for f in forms:
        if not f or f[0] != key[0] or len(f) < 3:
            continue
        d = edit_distance(key, f, budget)
        if d <= budget and (best is None or d < best[1]):
            best = (f, d)
    return best
