"""Each critical-content check on hand-made examples, peer consensus, and no flooding on real dev text."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.core.critical import CriticalChecker, CriticalReport, check_critical
from service.core.types import SignalSkipped, SignalValue

SRC = "Pañcime, bhikkhave, nīvaraṇā. Katame pañca? Āyasmā sāriputto sāvatthiyaṃ viharati. Natthi dukkhaṃ."
GOOD = (
    "Mendicants, there are these five hindrances. What five? Venerable Sāriputta was staying near Sāvatthī. "
    "There is no suffering."
)


@pytest.fixture(scope="module")
def checker() -> CriticalChecker:
    return CriticalChecker()


def _v(rep: CriticalReport, name: str) -> float:
    s = rep.signals[name]
    assert isinstance(s, SignalValue)
    return s.value


def _rules(rep: CriticalReport) -> set[str]:
    return {f.rule for f in rep.flags}


def test_clean_candidate_is_quiet(checker: CriticalChecker) -> None:
    rep = checker.check(SRC, GOOD, [GOOD] * 9)
    assert rep.flags == [] and _v(rep, "critical_score") == 0.0


def test_number_swap_fires_with_detail(checker: CriticalChecker) -> None:
    bad = GOOD.replace("five", "seven")
    rep = checker.check(SRC, bad, [GOOD] * 8 + [bad])
    flag = next(f for f in rep.flags if f.rule == "critical.number")
    assert flag.severity == "major"
    assert flag.detail.startswith("number: source and 8/9 peers say five; candidate says seven")
    assert "critical.number" in _rules(checker.check(SRC, bad, []))


def test_number_peer_consensus_without_source_evidence(checker: CriticalChecker) -> None:
    src = "Evaṃ me sutaṃ."  # no number on the source side
    peer = "He stayed there for five days."
    odd = "He stayed there for seven days."
    assert _v(checker.check(src, odd, [peer] * 8 + [odd]), "number_mismatch") >= 0.75
    # Half of the peers back the candidate: a real variation, not an error.
    assert _v(checker.check(src, odd, [peer] * 4 + [odd] * 5), "number_mismatch") < 0.5


@pytest.mark.parametrize("synonym", ["Monks", "Bhikkhus", "Mendicants"])
def test_synonyms_do_not_fire(checker: CriticalChecker, synonym: str) -> None:
    peers = [GOOD.replace("Mendicants", s) for s in ("Monks", "Bhikkhus", "Mendicants")] * 3
    rep = checker.check(SRC, GOOD.replace("Mendicants", synonym), peers)
    assert rep.flags == [] and _v(rep, "term_mismatch") == 0.0


def test_name_swap(checker: CriticalChecker) -> None:
    bad = GOOD.replace("Sāriputta", "Moggallāna")
    rep = checker.check(SRC, bad, [GOOD] * 9)
    flag = next(f for f in rep.flags if f.rule == "critical.name")
    assert "Sariputta" in flag.detail and "Moggallana" in flag.detail
    assert "critical.name" in _rules(checker.check(SRC, bad, []))


def test_negation_drop_alone_among_peers(checker: CriticalChecker) -> None:
    bad = GOOD.replace("There is no suffering", "There is suffering")
    rep = checker.check(SRC, bad, [GOOD] * 9)
    assert "critical.negation" in _rules(rep)
    assert "9/9 peers have more negations" in next(f.detail for f in rep.flags if f.rule == "critical.negation")
    assert _v(checker.check(SRC, bad, []), "negation_mismatch") > 0  # no peers: the source alone still speaks


def test_term_swap_scores(checker: CriticalChecker) -> None:
    bad = GOOD.replace("suffering", "craving")
    assert _v(checker.check(SRC, bad, [GOOD] * 9), "term_mismatch") >= 0.9
    assert _v(checker.check(SRC, GOOD, [GOOD] * 9), "term_mismatch") == 0.0


def test_check_passage_matches_single_checks(checker: CriticalChecker) -> None:
    cands = [GOOD] * 9 + [GOOD.replace("five", "seven")]
    reps = checker.check_passage(SRC, cands)
    assert len(reps) == 10 and reps[-1].peers == 9
    single = checker.check(SRC, cands[-1], cands[:-1])
    assert msgspec.json.encode(reps[-1]) == msgspec.json.encode(single)


def test_unknown_pair_is_skipped_and_serialises() -> None:
    rep = check_critical("text", "text", [], src_lang="san", tgt_lang="en")
    assert all(isinstance(s, SignalSkipped) for s in rep.signals.values()) and rep.flags == []
    assert b'"status":"skipped"' in msgspec.json.encode(rep)


DEV = Path(__file__).resolve().parents[3] / "shared" / "palibench-dev"


@pytest.mark.skipif(not DEV.is_dir(), reason="palibench-dev not beside the checkout")
def test_no_flood_on_real_sample(checker: CriticalChecker) -> None:
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
    from challenge_set import load_dev

    sources, models = load_dev()
    names = sorted(models)
    flagged = total = 0
    for pid in sorted(sources)[::8]:  # ~95 passages, ~950 candidates
        for rep in checker.check_passage(sources[pid], [models[m][pid] for m in names]):
            total += 1
            flagged += bool(rep.flags)
    assert total > 500 and flagged / total < 0.07
