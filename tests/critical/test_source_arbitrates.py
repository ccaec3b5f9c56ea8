"""The source arbitrates: no check flags a candidate that agrees with the source because its peers disagree."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.core.critical import CriticalChecker
from tests.critical.test_checks import GOOD, SRC, _rules

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def checker() -> CriticalChecker:
    return CriticalChecker()


def test_an41_two_candidates_the_source_sides_with_c(checker: CriticalChecker) -> None:
    """The README's AN 4.1 example cut to c ("four", as the source's catunnaṁ) and d ("three"): d alone is flagged."""
    ex = json.loads((ROOT / "openapi" / "examples" / "assessment-an4.1.json").read_text(encoding="utf-8"))
    texts = {c["id"]: c["text"] for c in ex["candidates"]}
    c, d = checker.check_passage(ex["source"]["text"], [texts["c"], texts["d"]])
    assert c.flags == []
    assert "critical.number" in _rules(d)
    number = next(f for f in d.flags if f.rule == "critical.number")
    assert "three" in number.detail and "four" in number.detail


@pytest.mark.parametrize("n_peers", [1, 2, 9])
@pytest.mark.parametrize(
    ("what", "peer"),
    [
        ("number", GOOD.replace("five", "six")),  # a number and the list size the source states (pañca)
        ("name", GOOD.replace("Sāriputta", "Moggallāna")),
        ("negation", GOOD.replace("There is no suffering", "There is suffering")),
    ],
)
def test_agreeing_with_the_source_is_never_flagged_for_the_peers_word(
    checker: CriticalChecker, what: str, peer: str, n_peers: int
) -> None:
    """However many peers say otherwise, a candidate saying what the source says gets no flag for it."""
    rep = checker.check(SRC, GOOD, [peer] * n_peers)
    assert rep.flags == [], (what, n_peers, [f.detail for f in rep.flags])


def test_the_peers_still_flag_a_candidate_the_source_contradicts(checker: CriticalChecker) -> None:
    """The other way round the peers and the source agree, and the odd candidate is flagged at every peer count."""
    for bad in (GOOD.replace("five", "six"), GOOD.replace("Sāriputta", "Moggallāna")):
        for n in (0, 1, 2, 9):
            assert _rules(checker.check(SRC, bad, [GOOD] * n)) & {"critical.number", "critical.name"}, (bad, n)


def test_a_peer_majority_needs_three_peers(checker: CriticalChecker) -> None:
    """Where the source says no number, two peers cannot demand one; nine can."""
    src = "Evaṃ me sutaṃ."
    peer, cand = "He stayed there for five days.", "He stayed there for some days."
    assert checker.check(src, cand, [peer] * 2).flags == []
    assert "critical.number" in _rules(checker.check(src, cand, [peer] * 9))
