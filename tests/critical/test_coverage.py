"""The translation lexicon and the source-coverage signals: what a candidate renders of the source, against peers."""

from __future__ import annotations

import gzip
from pathlib import Path

import msgspec
import numpy as np
import pytest

from service.core.critical import CriticalChecker
from service.core.critical.aligner import AlignParams, align_counts
from service.core.critical.coverage import COVERAGE_SIGNALS
from service.core.critical.renderings import FORMAT_VERSION, LEXICON_FILE, LexiconFile, load_translation_lexicon
from service.core.types import SignalSkipped, SignalValue
from service.platform.errors import InputError

SRC = (
    "Cattārimāni, bhikkhave, ariyasaccāni. Katamāni cattāri? Dukkhaṃ ariyasaccaṃ, dukkhasamudayaṃ ariyasaccaṃ. "
    "Rūpaṃ aniccaṃ, na taṃ mama. Cakkhu aniccaṃ, na so attā."
)
PEERS = [
    "Mendicants, there are four noble truths. What four? The noble truth of suffering, the noble truth of the "
    "origin of suffering. Form is impermanent, that is not mine. The eye is impermanent, it is not self.",
    "Monks, there are these four noble truths. Which four? The noble truth of suffering, the noble truth of the "
    "arising of suffering. Form is impermanent; it is not mine. The eye is impermanent; it is not the self.",
    "Bhikkhus, four are the noble truths. Which four? Suffering as a noble truth, the origin of suffering as a "
    "noble truth. Form is impermanent, this is not mine. The eye is impermanent, that is not a self.",
    "Mendicants, these are the four noble truths. What four? The noble truth of suffering and the noble truth of "
    "the origin of suffering. Form is impermanent: it is not mine. The eye is impermanent: it is not self.",
]
GOOD = PEERS[0]


@pytest.fixture(scope="module")
def checker() -> CriticalChecker:
    return CriticalChecker()


def _sig(checker: CriticalChecker, cand: str, name: str) -> SignalValue:
    rep = checker.check(SRC, cand, PEERS)
    s = rep.signals[name]
    assert isinstance(s, SignalValue), s
    return s


def _spanned(cand: str, s: SignalValue) -> list[str]:
    return [cand[a:b] for a, b in s.detail.get("spans", [])]  # type: ignore[attr-defined]


def test_shipped_lexicon_is_signed_and_renders_the_doctrine() -> None:
    lex = load_translation_lexicon(LEXICON_FILE)
    sig = lex.signature
    assert sig["format_version"] == FORMAT_VERSION and len(str(sig["corpus_sha256"])) == 64
    assert {"params", "libraries", "segments", "id"} <= sig.keys()
    best = max(lex.render["dukkh"].items(), key=lambda kv: kv[1])[0]
    assert best == "suffering"
    assert lex.best_source("suffering") is not None and lex.best_source("suffering")[0] == "dukkh"  # type: ignore
    assert "anicc" in lex.privative and lex.is_negator("aniccaṃ") and lex.is_negator("na")
    assert not lex.is_negator("dukkhaṃ")
    assert LEXICON_FILE.stat().st_size < 2_000_000  # the committed artifact stays small


def test_a_lexicon_of_another_format_is_refused(tmp_path: Path) -> None:
    data = LexiconFile(signature={"format_version": FORMAT_VERSION + 1}, pali={}, english={}, pali_count={})
    path = tmp_path / "old.json.gz"
    path.write_bytes(gzip.compress(msgspec.json.encode(data)))
    with pytest.raises(InputError, match="format"):
        load_translation_lexicon(path)


def test_em_learns_which_word_translates_which() -> None:
    # word 1 is in every pair ("the"), so word 2 co-occurs as often with target 1 as with target 2: counting cannot
    # tell which translates it; EM explains target 1 by word 1 and gives target 2 to word 2
    pairs = ([1, 2], [1, 3], [1, 4], [1, 2], [1, 3], [1, 4])
    src = [np.array(p) for p in pairs]
    tgt = [np.array(p) for p in pairs]
    links = align_counts(src, tgt, 5, 5, AlignParams(iterations=8, diagonal_tension=0.0))
    count = {(int(f), int(e)): float(c) for f, e, c in zip(links.src, links.tgt, links.count, strict=True)}
    for f in (1, 2, 3, 4):
        ranked = sorted(range(1, 5), key=lambda e: -count.get((f, e), 0.0))
        assert ranked[0] == f, (f, ranked)


def test_untouched_candidate_is_quiet(checker: CriticalChecker) -> None:
    rep = checker.check(SRC, GOOD, PEERS[1:])
    for name in COVERAGE_SIGNALS:
        s = rep.signals[name]
        assert isinstance(s, SignalValue) and s.value < 0.2, (name, s)


def test_substitution_names_both_terms_and_points_at_the_word(checker: CriticalChecker) -> None:
    cand = GOOD.replace("suffering", "happiness")
    s = _sig(checker, cand, "term_substitution")
    assert s.value >= 0.8
    assert _spanned(cand, s) == ["happiness", "happiness"]
    summary = str(s.detail["summary"])
    assert "dukkhaṃ" in summary and "suffering" in summary and "sukh" in summary and "not in the source" in summary
    # one occurrence replaced is still seen
    one = GOOD.replace("suffering", "happiness", 1)
    assert _sig(checker, one, "term_substitution").value >= 0.5


def test_dropped_sentence_is_an_omission_located_where_it_was(checker: CriticalChecker) -> None:
    cand = GOOD.replace(" Form is impermanent, that is not mine.", "")
    s = _sig(checker, cand, "source_omission")
    assert s.value >= 0.1 > _sig(checker, GOOD, "source_omission").value
    ((a, b),) = s.detail["spans"]  # type: ignore[misc]
    assert a == b and cand[:a].endswith("origin of suffering.")


def test_added_sentence_is_unlicensed_and_spanned(checker: CriticalChecker) -> None:
    extra = "The king rode to Rājagaha and gave elephants to the brahmins."
    cand = GOOD + " " + extra
    s = _sig(checker, cand, "unlicensed_content")
    assert s.value >= 0.1 and _spanned(cand, s) == [extra[:-1]]  # the sentence's words, its full stop after


def test_without_peers_or_lexicon_the_signals_are_skipped() -> None:
    rep = CriticalChecker().check(SRC, GOOD, [])
    assert isinstance(rep.signals["term_substitution"], SignalSkipped)
    off = CriticalChecker(translation=False).check(SRC, GOOD, PEERS)
    skipped = off.signals["source_omission"]
    assert isinstance(skipped, SignalSkipped) and "lexicon" in skipped.reason
    assert off.signals["number_mismatch"] == CriticalChecker().check(SRC, GOOD, PEERS).signals["number_mismatch"]


def test_existing_findings_carry_spans(checker: CriticalChecker) -> None:
    cand = GOOD.replace("four", "three")
    rep = checker.check(SRC, cand, PEERS)
    (flag,) = [f for f in rep.flags if f.rule == "critical.number"]
    assert [cand[s.start : s.end] for s in flag.spans] == ["three", "three"]


def test_a_word_the_source_licenses_elsewhere_is_weaker_evidence(checker: CriticalChecker) -> None:
    cand = GOOD.replace("truth of suffering", "truth of happiness")
    foreign = checker.check(SRC, cand, PEERS).signals["term_substitution"]
    # with sukhā in the source "happiness" is licensed (the peers say "pleasant" for it): half the evidence
    src = SRC + " Sukhā vedanā."
    peers = [p + " A pleasant feeling." for p in PEERS]
    licensed = checker.check(src, cand + " A pleasant feeling.", peers).signals["term_substitution"]
    assert isinstance(foreign, SignalValue) and isinstance(licensed, SignalValue)
    # three of the four peers say "the noble truth of suffering" (the fourth "suffering as a noble truth")
    assert foreign.value >= 0.7 and 0 < licensed.value <= 0.5 * foreign.value + 1e-9
    assert "in the source too" in str(licensed.detail["summary"])


# a fifth translation: three peers then say "it is not self" in the same words (the fourth "that is not a self")
NEG_PEERS = [
    *PEERS,
    "Mendicants, there are four noble truths. Which four? The noble truth of suffering, the noble truth of the "
    "origin of suffering. Form is impermanent, that is not mine. The eye is impermanent, it is not self.",
]


@pytest.mark.parametrize(
    ("cand", "dropped", "spanned"),
    [
        (GOOD.replace("it is not self", "it is self"), True, "is self"),
        (GOOD.replace("The eye is impermanent", "The eye is not impermanent"), False, "not"),
    ],
)
def test_negation_in_the_peers_context(checker: CriticalChecker, cand: str, dropped: bool, spanned: str) -> None:
    s = checker.check(SRC, cand, NEG_PEERS).signals["negation_context"]
    assert isinstance(s, SignalValue)
    assert s.value >= 0.5 and s.detail["dropped"] is dropped
    assert _spanned(cand, s) == [spanned]
    assert "peers" in str(s.detail["summary"])
    assert checker.check(SRC, GOOD, NEG_PEERS).signals["negation_context"].value < 0.5  # type: ignore[union-attr]
    # the flag (worded by the rule's first signal that fires, here maybe the clause-level one) points there too
    (flag,) = [f for f in checker.check(SRC, cand, NEG_PEERS).flags if f.rule == "critical.negation"]
    assert any(spanned in cand[x.start : x.end] for x in flag.spans)


def test_two_peers_saying_a_negation_the_other_way_are_not_enough(checker: CriticalChecker) -> None:
    # with the four peers only two say "it is not self" word for word: below NEGATION_VOTERS, nothing is read
    cand = GOOD.replace("it is not self", "it is self")
    assert _sig(checker, cand, "negation_context").value == 0.0  # (the clause-level negation check still sees it)


def test_dropped_sentence_loses_the_phrases_the_peers_share(checker: CriticalChecker) -> None:
    cand = GOOD.replace(" Form is impermanent, that is not mine.", "")
    s = _sig(checker, cand, "phrase_omission")
    assert s.value > 2 * _sig(checker, GOOD, "phrase_omission").value and s.value >= 0.1
    ((a, b),) = s.detail["spans"]  # type: ignore[misc]
    assert a == b and cand[:a].endswith("origin of suffering.")
    assert "omission" in str(s.detail["summary"])


def test_column_medians_are_the_statistics_median() -> None:
    """The omission signals take the peers' median per column with a sort; it must be ``statistics.median``
    (the mean of the middle two of an even count), or the signals' values change."""
    import statistics

    from service.core.critical.coverage import _column_medians

    rng = np.random.default_rng(3)
    for rows in (2, 3, 8, 9):
        a = rng.integers(0, 5, size=(rows, 7)).astype(float)
        want = [statistics.median(a[:, j]) for j in range(a.shape[1])]
        assert _column_medians(a).tolist() == want
    assert _column_medians(np.zeros((9, 0))).shape == (0,)


def test_a_source_read_again_gives_the_same_signals(checker: CriticalChecker) -> None:
    """The source view is cached per source text: a second passage of the same source reads the same."""
    texts = [GOOD, *PEERS[1:]]
    first = checker.check_passage(SRC, texts)
    again = checker.check_passage(SRC, texts)
    assert [r.signals for r in first] == [r.signals for r in again]


# issue 34 item 2: the source speaks for coverage when there are no peers (one candidate) or one (two candidates)
DROPPED = GOOD.replace(" Form is impermanent, that is not mine.", "")
TRUNCATED = GOOD.split(" Form is impermanent")[0]
ADDED = GOOD + " The king rode to Rājagaha and gave elephants to the brahmins."


@pytest.mark.parametrize("peers", [[], PEERS[1:2]], ids=["one candidate", "two candidates"])
def test_coverage_reads_the_source_without_enough_peers(checker: CriticalChecker, peers: list[str]) -> None:
    def sig(cand: str, name: str) -> SignalValue:
        s = checker.check(SRC, cand, peers).signals[name]
        assert isinstance(s, SignalValue), (name, s)
        assert s.detail.get("peers", len(peers)) == len(peers)
        return s

    assert sig(DROPPED, "source_omission").value >= 0.1 + sig(GOOD, "source_omission").value
    assert sig(TRUNCATED, "source_omission").value >= 0.2 + sig(GOOD, "source_omission").value
    assert sig(ADDED, "unlicensed_content").value >= 0.1 > sig(GOOD, "unlicensed_content").value
    tail = sig(TRUNCATED, "source_tail_omission")
    assert tail.value >= 0.5 > sig(GOOD, "source_tail_omission").value
    assert "truncation" in str(tail.detail["summary"]) and tail.detail["spans"] == [[len(TRUNCATED)] * 2]
    omitted = sig(TRUNCATED, "source_omission")
    assert "source" in str(omitted.detail["summary"]) and "anicc" in str(omitted.detail["summary"])
    # a swap or a negation in another place needs voters: nothing is read rather than a zero
    for name in ("term_substitution", "negation_context"):
        assert isinstance(checker.check(SRC, GOOD, peers).signals[name], SignalSkipped)


def test_omission_weighs_the_peers_by_their_number(checker: CriticalChecker) -> None:
    """The peers' share of the omission grows with their number (a quarter each, all from PEERS_FULL on): the
    value moves from the source's reading towards the peers', no cliff where peers start to count."""
    from service.core.critical.coverage import PEERS_FULL

    weights, values = [], []
    for n in range(PEERS_FULL + 1):
        peers = (PEERS[1:] * 2)[:n]
        s = checker.check(SRC, DROPPED, peers).signals["source_omission"]
        assert isinstance(s, SignalValue)
        weights.append(s.detail["peer_weight"])
        alone = float(s.detail["source_only"])  # type: ignore[arg-type]
        values.append((s.value, alone))
    assert weights == [n / PEERS_FULL for n in range(PEERS_FULL + 1)]
    assert values[0][0] == pytest.approx(values[0][1], abs=1e-4)  # no peers: the source alone
    # the source-only reading is the same whatever the peers
    assert len({round(a, 4) for _, a in values}) == 1
