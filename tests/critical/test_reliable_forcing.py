"""Forcing only what is reliable: list sizes counted as listed, name spellings apart from other names, Pali
numerals inside compounds, "both" no "two" (issue 34, dev passages a reviewer found forced wrongly)."""

from __future__ import annotations

import pytest

from service.core.critical import CriticalChecker, CriticalReport
from service.core.critical.names import canon, edit_distance, nearest
from service.core.types import SignalValue

SN12_2_12 = (
    "Katamañca, bhikkhave, viññāṇaṁ? Chayime, bhikkhave, viññāṇakāyā— cakkhuviññāṇaṁ, sotaviññāṇaṁ, ghānaviññāṇaṁ, "
    "jivhāviññāṇaṁ, kāyaviññāṇaṁ, manoviññāṇaṁ. Idaṁ vuccati, bhikkhave, viññāṇaṁ."
)
SIX_NAMED = (
    "And what, monks, is consciousness? There are these six classes of consciousness: eye-consciousness, "
    "ear-consciousness, nose-consciousness, tongue-consciousness, body-consciousness, mind-consciousness. "
    "This is called consciousness."
)
# openai-gpt-5.2 on dev: the number stands after "are the", not in a "these six" phrase, and all six are listed
SIX_LISTED = (
    "And what, bhikkhus, is consciousness? These, bhikkhus, are the six classes of consciousness: eye-consciousness, "
    "ear-consciousness, nose-consciousness, tongue-consciousness, body-consciousness, mind-consciousness. "
    "This is called, bhikkhus, consciousness."
)
MN82_24 = (
    "Atha kho āyasmā raṭṭhapālo pitaraṁ etadavoca: “sace, gahapati, dātabbaṁ, detha; mā no viheṭhetha”. "
    "Atha kho āyasmato raṭṭhapālassa pitā āyasmantaṁ raṭṭhapālaṁ paṇītena khādanīyena bhojanīyena sahatthā "
    "santappesi."
)
MN82_PEER = (
    "Then Venerable Raṭṭhapāla said to his father: 'Householder, if food is to be given, give it; do not harass us.' "
    "Then the father of Venerable Raṭṭhapāla served Venerable Raṭṭhapāla with his own hands with fine foods."
)


@pytest.fixture(scope="module")
def checker() -> CriticalChecker:
    return CriticalChecker()


def _rules(rep: CriticalReport) -> set[str]:
    return {f.rule for f in rep.flags}


def test_a_list_of_six_that_lists_six_is_not_flagged(checker: CriticalChecker) -> None:
    assert "critical.list_size" not in _rules(checker.check(SN12_2_12, SIX_LISTED, [SIX_NAMED] * 9))
    # five listed where the source and the peers have six: still flagged
    five = SIX_LISTED.replace("six", "five").replace(" body-consciousness,", "")
    assert "critical.list_size" in _rules(checker.check(SN12_2_12, five, [SIX_NAMED] * 9))


@pytest.mark.parametrize("peers", [0, 2, 9])
def test_a_spelling_of_the_source_name_is_a_minor_spelling_finding(checker: CriticalChecker, peers: int) -> None:
    """mn82:24 "Raṭhapāla" for raṭṭhapālo: a MINOR critical.name_spelling quoting the word as on the page."""
    cand = MN82_PEER.replace("Raṭṭhapāla", "Raṭhapāla")
    rep = checker.check(MN82_24, cand, [MN82_PEER] * peers)
    assert "critical.name" not in _rules(rep)
    flag = next(f for f in rep.flags if f.rule == "critical.name_spelling")
    assert flag.severity == "minor"
    assert "\u201cRaṭhapāla\u201d" in flag.detail and "raṭṭhapāl" in flag.detail
    assert flag.spans and cand[flag.spans[0].start : flag.spans[0].end] == "Raṭhapāla"


def test_another_name_is_still_a_major_name_finding_quoted_as_on_the_page(checker: CriticalChecker) -> None:
    cand = MN82_PEER.replace("Raṭṭhapāla", "Moggallāna")
    rep = checker.check(MN82_24, cand, [MN82_PEER] * 9)
    flag = next(f for f in rep.flags if f.rule == "critical.name")
    assert flag.severity == "major" and "Moggallāna" in flag.detail and "Raṭṭhapāla" in flag.detail
    assert "critical.name_spelling" not in _rules(rep)


@pytest.mark.parametrize(
    ("source", "candidate"),
    [
        # the other edition's spelling of a place: b/v (setabyaṁ, Setavyā)
        ("Bhagavā antarā ca ukkaṭṭhaṁ antarā ca setabyaṁ addhānamaggappaṭipanno hoti.", "between Ukkaṭṭhā and Setavyā"),
        # an English word made from a source name (venāgapurikā, "the Venāgapuran brahmin")
        ("Venāgapuriko vacchagotto brāhmaṇo bhagavantaṁ etadavoca.", "the Venāgapuran brahmin Vacchagotta said"),
        # a name inside a compound (gosiṅgasālavanadāye, "Sāla-tree Wood")
        ("Āyasmā anuruddho gosiṅgasālavanadāye viharati.", "Anuruddha was living in the Gosiṅga Sāla-tree Wood."),
        # a vocative against its stem (udāyi, Udāyin)
        ("Evaṁ vutte, bhagavā āyasmantaṁ udāyiṁ etadavoca: “sādhu, udāyi”.", "the Buddha said to Udāyin, “Good.”"),
    ],
)
def test_spellings_and_forms_of_the_source_name_are_no_finding(
    checker: CriticalChecker, source: str, candidate: str
) -> None:
    rep = checker.check(source, candidate, [])
    assert not _rules(rep) & {"critical.name", "critical.name_spelling"}, [f.detail for f in rep.flags]


def test_a_name_without_diacritics_answers_the_peers(checker: CriticalChecker) -> None:
    """Mara and Vijaya written plain are the peers' Māra and Vijayā, not lost names."""
    src = "Atha kho māro pāpimā yena vijayā bhikkhunī tenupasaṅkami."
    peer = "Then Māra the Wicked went up to the nun Vijayā."
    rep = checker.check(src, "Then Mara the Evil One approached the nun Vijaya.", [peer] * 9)
    assert "critical.name" not in _rules(rep)


def test_names_compare_on_the_transliterated_form() -> None:
    assert canon("sarasvati") == canon("sarassati") and canon("baranasi") == canon("varanasi")
    assert canon("udayin") == canon("udayi")
    assert edit_distance("rathapal", "ratthapal") == 1 and edit_distance("abcdef", "uvwxyz", 2) == 3
    assert nearest("rathapal", ["ratthapal", "moggallan"]) == ("ratthapal", 1)
    assert nearest("moggallan", ["ratthapal"]) is None


@pytest.mark.parametrize(
    ("source", "candidate", "peer"),
    [
        # vīsavassasatikā "a hundred and twenty years": twenty inside a compound
        (
            "Atha kho dve brāhmaṇā jiṇṇā vīsavassasatikā jātiyā bhagavantaṁ upasaṅkamiṁsu.",
            "Then two old brahmins, one hundred and twenty years old, approached the Buddha.",
            "Then two very old brahmins came to the Buddha.",
        ),
        # antaraṭṭhakā himapātasamayā "the eight days of frost"
        (
            "Yā tā rattiyo sītā hemantikā antaraṭṭhakā himapātasamayā.",
            "on those cold winter nights of the eight-day interval when snow falls",
            "on those cold winter nights when snow falls",
        ),
        # tiṁsāya, cattārīsāya: inflected tens the extraction used to miss
        (
            "Seyyathāpi dasannaṁ vā kaṭṭhavāhānaṁ vīsāya vā tiṁsāya vā cattārīsāya vā mahāaggikkhandho jaleyya.",
            "Suppose a fire burned with ten, twenty, thirty, or forty loads of wood.",
            "Suppose a fire burned with ten, twenty, thirty, or forty cartloads of wood.",
        ),
    ],
)
def test_numerals_inside_pali_words_back_the_candidate(
    checker: CriticalChecker, source: str, candidate: str, peer: str
) -> None:
    for peers in ([], [peer] * 9):
        assert "critical.number" not in _rules(checker.check(source, candidate, peers))


def test_both_is_no_two(checker: CriticalChecker) -> None:
    """ubhayaṁ rendered "too" where nine peers say "both": the peers' weak "both" makes no demand for "two"."""
    src = "Kāmayogena saṁyuttā, bhavayogena cūbhayaṁ."
    peer = "Bound by the bond of sensuality and the bond of existence both."
    rep = checker.check(src, "Bound by the bond of craving, and by the bond of existence too.", [peer] * 9)
    assert "critical.number" not in _rules(rep)


NEG_SRC = "Idha, bhikkhave, ekaccassa cittaṁ abhāvitaṁ hoti. Cakkhu anattā."


@pytest.mark.parametrize(
    ("cand", "peer"),
    [
        ("The mind of some person is not developed. The eye is not-self.", "{} is undeveloped. The eye is non-self."),
        ("The mind of some person is undeveloped. The eye is non-self.", "{} is not developed. The eye is not-self."),
    ],
)
def test_a_privative_answers_a_not(checker: CriticalChecker, cand: str, peer: str) -> None:
    """ "undeveloped" says what "not developed" says, "non-self" what "not-self" says: no located flip either way."""
    peers = [peer.format("The mind of some person")] * 9
    rep = checker.check(NEG_SRC, cand, peers)
    flip = rep.signals["negation_flip"]
    assert isinstance(flip, SignalValue) and flip.value == 0.0, flip
    assert "critical.negation" not in _rules(rep)


def test_a_real_reversal_is_still_located(checker: CriticalChecker) -> None:
    peers = ["The mind of some person is undeveloped. The eye is not-self."] * 9
    rep = checker.check(NEG_SRC, "The mind of some person is developed. The eye is not-self.", peers)
    flip = rep.signals["negation_flip"]
    assert isinstance(flip, SignalValue) and flip.value == 0.0  # a privative makes no flip of its own...
    peers = ["The mind of some person is not developed. The eye is not-self."] * 9
    rep = checker.check(NEG_SRC, "The mind of some person is developed. The eye is not-self.", peers)
    flip = rep.signals["negation_flip"]
    assert isinstance(flip, SignalValue) and flip.value >= 0.9  # ...a negator over the same words does
