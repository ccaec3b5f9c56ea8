"""Each critical-content check on hand-made examples, peer consensus, and no flooding on real dev text."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from service.core.critical import CHECKS, CriticalChecker, CriticalReport, check_critical
from service.core.risk import RiskRegistry
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
    # each name as it stands on a page (the peers' Sāriputta, the candidate's Moggallāna), not a folded stem
    assert "Sāriputta" in flag.detail and "Moggallāna" in flag.detail
    assert "critical.name" in _rules(checker.check(SRC, bad, []))


def test_negation_drop_alone_among_peers(checker: CriticalChecker) -> None:
    bad = GOOD.replace("There is no suffering", "There is suffering")
    rep = checker.check(SRC, bad, [GOOD] * 9)
    assert "critical.negation" in _rules(rep)
    detail = next(f.detail for f in rep.flags if f.rule == "critical.negation")
    # located: the clause the reviewer has to read, and the word the peers negate there
    assert detail == (
        "negation: 9/9 peers negate (suffering) where the candidate does not: \u201cThere is suffering.\u201d"
    )
    assert len([f for f in rep.flags if f.rule == "critical.negation"]) == 1
    alone = checker.check(SRC, bad, [])
    assert _v(alone, "negation_mismatch") > 0  # no peers: the source alone still speaks
    assert isinstance(alone.signals["negation_flip"], SignalSkipped)


def test_negation_added_is_located(checker: CriticalChecker) -> None:
    bad = GOOD.replace("was staying near", "was not staying near")
    rep = checker.check(SRC, bad, [GOOD] * 9)
    flip = rep.signals["negation_flip"]
    assert isinstance(flip, SignalValue) and flip.value == 1.0 and flip.detail["added"] == 1.0
    assert "the candidate negates (staying, near) where 9/9 peers do not" in str(flip.detail["summary"])
    assert "critical.negation" in _rules(rep)


@pytest.mark.parametrize(
    ("peer", "cand", "fires"),
    [
        # parallel clauses: the peers' "without lust" has an equally good match that keeps its negation
        (
            "You know a mind with lust as with lust; you know a mind without lust as without lust.",
            "You know a mind without lust as without lust; you know a mind with lust as with lust.",
            False,
        ),
        # "impermanent" for "not permanent": no negated word reappears un-negated, one negator fewer is half a vote
        ("Form is not permanent. Feeling is not permanent.", "Form is impermanent. Feeling is impermanent.", False),
        ("He does not kill living beings. He gives gifts.", "He does kill living beings. He gives gifts.", True),
    ],
)
def test_negation_flip_needs_a_located_contradiction(
    checker: CriticalChecker, peer: str, cand: str, fires: bool
) -> None:
    rep = checker.check("Na.", cand, [peer] * 9)
    assert (_v(rep, "negation_flip") >= 0.8) is fires


def test_term_swap_scores(checker: CriticalChecker) -> None:
    bad = GOOD.replace("suffering", "craving")
    assert _v(checker.check(SRC, bad, [GOOD] * 9), "term_mismatch") >= 0.9
    assert _v(checker.check(SRC, GOOD, [GOOD] * 9), "term_mismatch") == 0.0
    swap = checker.check(SRC, bad, [GOOD] * 9).signals["term_swap"]
    assert isinstance(swap, SignalValue) and swap.value == 1.0
    assert swap.detail["summary"] == (
        "term: most peers say \u201csuffering\u201d, the candidate never does and says \u201ccraving\u201d"
    )
    # a synonym (another rendering of the same Pali term) is not a swap
    assert _v(checker.check(SRC, GOOD.replace("suffering", "stress"), [GOOD] * 9), "term_swap") == 0.0
    assert isinstance(checker.check(SRC, bad, [GOOD] * 2).signals["term_swap"], SignalSkipped)  # two peers: no vote


@pytest.mark.parametrize(
    ("extra", "expected"),
    [("", 0.0), (" He then went home and ate his meal in the evening.", 0.5)],
)
def test_content_excess(checker: CriticalChecker, extra: str, expected: float) -> None:
    value = _v(checker.check(SRC, GOOD + extra, [GOOD] * 9), "content_excess")
    assert value == pytest.approx(expected, abs=0.01)


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


def test_opted_in_term_flag_fires_on_swaps_only() -> None:
    # the documented opt-in: a term the candidate merely lacks scores as high as a swap but is not worth a flag
    checker = CriticalChecker(thresholds={"term_mismatch": 0.9})
    dropped = checker.check(SRC, GOOD.replace("suffering", "the thing"), [GOOD] * 9)
    assert _v(dropped, "term_mismatch") >= 0.9 and "critical.term" not in _rules(dropped)
    assert "critical.term" in _rules(checker.check(SRC, GOOD.replace("suffering", "craving"), [GOOD] * 9))


def test_reports_carry_exactly_the_table_signals_in_its_order(checker: CriticalChecker) -> None:
    # a signal computed without a record would never flag, never skip with the others, and be missing from views
    names = [c.name for c in CHECKS]
    with_peers = checker.check(SRC, GOOD, [GOOD] * 9)
    alone = checker.check(SRC, GOOD, [])
    unknown = check_critical("text", "text", [], src_lang="san")
    for rep in (with_peers, alone, unknown):
        assert list(rep.signals) == [*names, "critical_score"]
    assert all(isinstance(s, SignalValue) for s in with_peers.signals.values())
    skipped_alone = {k for k, s in alone.signals.items() if isinstance(s, SignalSkipped)}
    assert skipped_alone == {c.name for c in CHECKS if c.needs_peers}


def test_each_rule_has_one_severity_that_the_shipped_models_force() -> None:
    # which of a rule's signals fires first must not change its severity, and a risk model that forces a critical
    # rule must name one the table raises, at a severity the model forces
    severity: dict[str, str] = {}
    for c in CHECKS:
        assert severity.setdefault(c.rule, c.severity) == c.severity, c.name
    models = RiskRegistry.load(Path(__file__).resolve().parents[2] / "models").models.values()
    forced = [(m, r) for m in models for r in m.hard_flags.rules or [] if r.startswith("critical.")]
    assert forced
    for m, r in forced:
        assert r in severity and severity[r] in m.hard_flags.severities, (m.name, r)


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


LONG = (
    "Mendicants, there are these five hindrances. What five? Venerable Sāriputta was staying near Sāvatthī. "
    "He taught the monks about the origin of craving. There is no suffering."
)


@pytest.mark.parametrize(
    ("cand", "omitted", "added"),
    [
        (LONG, 0.0, 0.0),
        # the dropped sentence leaves the same gap against every peer, and the reviewer sees which one
        (LONG.replace(" He taught the monks about the origin of craving.", ""), 0.2857, 0.0),
        (LONG + " The king of Kosala rode out on his elephant to see the park.", 0.0, 0.3),
        # two sentences merged into one are still covered: no omission
        (LONG.replace("Sāvatthī. He taught", "Sāvatthī, and he taught"), 0.0, 0.0),
    ],
)
def test_omitted_and_added_content(checker: CriticalChecker, cand: str, omitted: float, added: float) -> None:
    rep = checker.check(SRC, cand, [LONG] * 9)
    assert _v(rep, "omitted_content") == pytest.approx(omitted, abs=1e-4)
    assert _v(rep, "added_content") == pytest.approx(added, abs=1e-4)
    if omitted:
        detail = rep.signals["omitted_content"]
        assert isinstance(detail, SignalValue)
        assert detail.detail["summary"] == (
            "omission: 9/9 peers have content the candidate does not cover, "
            "e.g. \u201cHe taught the monks about the origin of craving.\u201d"
        )


def test_added_sentence_flags_and_verbosity_does_not(checker: CriticalChecker) -> None:
    added = checker.check(SRC, LONG + " The king of Kosala rode out on his elephant to see the park.", [LONG] * 9)
    flag = next(f for f in added.flags if f.rule == "critical.added_content")
    assert flag.severity == "major" and "The king of Kosala rode out" in flag.detail
    # longer but matched everywhere (a wordier rendering of the same clauses): content excess, nothing added
    wordy = LONG.replace("He taught the monks", "He taught the monks, carefully and at length,")
    rep = checker.check(SRC, wordy, [LONG] * 9)
    assert _v(rep, "content_excess") > 0.1 and _v(rep, "added_content") == 0.0
    assert "critical.added_content" not in _rules(rep)


def test_negation_consensus_is_the_mean_of_located_and_count(checker: CriticalChecker) -> None:
    bad = GOOD.replace("There is no suffering", "There is suffering")
    rep = checker.check(SRC, bad, [GOOD] * 9)
    expected = (_v(rep, "negation_flip") + _v(rep, "negation_mismatch")) / 2
    assert _v(rep, "negation_consensus") == pytest.approx(expected, abs=1e-4) and expected >= 0.8
    assert isinstance(checker.check(SRC, bad, []).signals["negation_consensus"], SignalSkipped)


def test_reviewer_wording_does_not_depend_on_the_process_hash_seed() -> None:
    # set iteration order changes with PYTHONHASHSEED; findings at equal risk must still read the same
    import os
    import subprocess
    import sys

    script = (
        "import msgspec; from service.core.critical import check_critical; "
        "peers=['The five aggregates are form, feeling, perception, choices and consciousness.']*9; "
        "cand='The five hindrances are desire, ill will, dullness, restlessness and doubt.'; "
        "print(msgspec.json.encode(check_critical('Pañcime khandhā.', cand, peers)).decode())"
    )
    root = Path(__file__).resolve().parents[2]
    out = {
        subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            check=True,
            cwd=root,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2", "3", "4")
    }
    assert len(out) == 1
