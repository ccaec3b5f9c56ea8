"""Candidate signals and hard flags on tiny synthetic passages (no embedding model: hand-made vectors)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import service.core.signals.compute as compute_module
from service.core.signals import (
    FAMILIES,
    PEER_SIGNALS,
    SIGNAL_NAMES,
    CandidateSignals,
    LengthModel,
    add_translator_signal,
    candidate_flags,
    compute_signals,
    fit_length_model,
    letter_count,
)
from service.core.signals.base import Passage
from service.core.types import SignalResult, SignalSkipped, SignalValue

TOL = 1e-4
R2 = math.sqrt(0.5)
# three unit vectors in 2-D: along x, along y, and on the diagonal between them
EMB3 = np.array([[1.0, 0.0], [0.0, 1.0], [R2, R2]])
SRC_EMB = np.array([1.0, 0.0])
PALI = "Evaṁ me sutaṁ. Ekaṁ samayaṁ bhagavā sāvatthiyaṁ viharati jetavane anāthapiṇḍikassa ārāme."
ENGLISH = (
    "So I have heard. At one time the Buddha was staying near Sāvatthī in Jeta's Grove, Anāthapiṇḍika's monastery."
)


def value(res: object) -> float:
    assert isinstance(res, SignalValue), res
    return res.value


def three() -> list:
    return compute_signals(PALI, [ENGLISH, ENGLISH, ENGLISH], source_embedding=SRC_EMB, candidate_embeddings=EMB3)


@pytest.mark.parametrize(
    ("signal", "expected"),
    [
        # c0's peers sum to (R2, 1 + R2): a centroid at 67.5 degrees, so 1 - cos(67.5) from both axis vectors
        ("peer_centroid_distance", [1 - math.cos(math.radians(67.5)), 1 - math.cos(math.radians(67.5)), 0.0]),
        ("peer_mean_distance", [(1 + (1 - R2)) / 2, (1 + (1 - R2)) / 2, 1 - R2]),
        ("peer_knn_distance", [(1 + (1 - R2)) / 2, (1 + (1 - R2)) / 2, 1 - R2]),  # k = min(3, n - 1) = 2
        ("source_distance", [0.0, 1.0, 1 - R2]),
        # c0 against the others' centroid distances (0.6173, 0): mean 0.3087, sd 0.4365; c2's two peers agree
        # exactly (sd 0), so the 0.005 sd floor applies: -0.6173 / 0.005
        ("peer_centroid_z", [R2, R2, -(1 - math.cos(math.radians(67.5))) / 0.005]),
        # identical texts agree perfectly among peers
        ("peer_chrf_risk", [0.0, 0.0, 0.0]),
    ],
)
def test_peer_and_source_signals_hand_computed(signal: str, expected: list[float]) -> None:
    got = [value(cs.signals[signal]) for cs in three()]
    assert got == pytest.approx(expected, abs=TOL)


def test_embeddings_are_normalised_before_cosine() -> None:
    scaled = compute_signals(PALI, [ENGLISH] * 3, source_embedding=SRC_EMB * 7, candidate_embeddings=EMB3 * 3)
    assert [value(cs.signals["peer_centroid_distance"]) for cs in scaled] == pytest.approx(
        [value(cs.signals["peer_centroid_distance"]) for cs in three()], abs=TOL
    )


def test_one_candidate_skips_every_peer_signal_with_a_reason() -> None:
    (cs,) = compute_signals(PALI, [ENGLISH], source_embedding=SRC_EMB, candidate_embeddings=EMB3[:1])
    for name in PEER_SIGNALS:
        assert isinstance(cs.signals[name], SignalSkipped), name
        assert "two candidates" in cs.signals[name].reason
    assert value(cs.signals["source_distance"]) == pytest.approx(0.0, abs=TOL)


def test_two_candidates_have_centroid_but_no_spread_signals() -> None:
    out = compute_signals(PALI, [ENGLISH, ENGLISH], source_embedding=SRC_EMB, candidate_embeddings=EMB3[:2])
    assert value(out[0].signals["peer_centroid_distance"]) == pytest.approx(1.0, abs=TOL)
    assert isinstance(out[0].signals["peer_centroid_z"], SignalSkipped)


def test_without_embeddings_the_text_signals_still_compute() -> None:
    out = compute_signals(PALI, [ENGLISH, ENGLISH[:40], ENGLISH])
    assert isinstance(out[0].signals["source_distance"], SignalSkipped)
    assert isinstance(out[0].signals["peer_centroid_distance"], SignalSkipped)
    assert value(out[1].signals["peer_chrf_risk"]) > value(out[0].signals["peer_chrf_risk"])
    assert value(out[1].signals["peer_length_short_z"]) > 0.0
    assert isinstance(out[0].signals["length_ratio_z"], SignalSkipped)  # no length model given
    assert isinstance(out[0].signals["novelty"], SignalSkipped)


@pytest.mark.parametrize(
    ("candidates", "expected"),
    [
        # chrF (see tests/core/test_chrf.py): ab->abc 7/11, ab->abcd 25/53; abc->ab 7/8, abc->abcd 115/167;
        # abcd->ab 25/32, abcd->abc 115/128. Risk = 1 - mean over the peers / 100.
        (
            ["ab", "abc", "abcd"],
            [1 - (7 / 11 + 25 / 53) / 2, 1 - (7 / 8 + 115 / 167) / 2, 1 - (25 / 32 + 115 / 128) / 2],
        ),
        (["ab", "abc"], [1 - 7 / 11, 1 - 7 / 8]),
        (["abc", "xyz", "abc"], [0.5, 1.0, 0.5]),
    ],
)
def test_peer_chrf_risk_table(candidates: list[str], expected: list[float]) -> None:
    got = [value(cs.signals["peer_chrf_risk"]) for cs in compute_signals(PALI, candidates)]
    assert got == pytest.approx(expected, abs=TOL)


NEEDS_TWO = "needs at least two candidates of the same passage"
NEEDS_THREE = "needs at least three candidates (a spread of the other candidates)"


@pytest.mark.parametrize(
    ("n", "kwargs", "expected"),
    [
        (
            1,
            {},
            {
                "source_distance": "not requested (check source_distance) or no source embedding",
                **{name: NEEDS_TWO for name in PEER_SIGNALS},
                "length_ratio_z": "no length model for pli-en",
                "length_ratio_short_z": "no length model for pli-en",
                "novelty": "source novelty was not looked up",
            },
        ),
        (
            2,
            {"candidate_embeddings": EMB3[:2], "source_embedding": SRC_EMB},
            {
                "peer_centroid_z": NEEDS_THREE,
                "source_distance_peer_z": NEEDS_THREE,
                "peer_length_z": NEEDS_THREE,
                "peer_length_short_z": NEEDS_THREE,
            },
        ),
        (
            3,
            {"candidate_embeddings": EMB3},
            {
                "source_distance": "not requested (check source_distance) or no source embedding",
                "source_distance_peer_z": "no source embedding",
            },
        ),
        (
            # source-space embeddings alone give source_distance; its peer z counts among the peer-embedding signals
            3,
            {"source_space_embeddings": EMB3, "source_embedding": SRC_EMB},
            {
                name: "no candidate embeddings"
                for name in (
                    "peer_centroid_distance",
                    "peer_centroid_z",
                    "peer_mean_distance",
                    "peer_knn_distance",
                    "source_distance_peer_z",
                )
            },
        ),
    ],
)
def test_skip_reasons_table(n: int, kwargs: dict[str, object], expected: dict[str, str]) -> None:
    if n > 1:  # give everything else a signal can need, so only the skips the row is about remain
        kwargs = {"length_model": LM, "novelty": SignalValue(value=0.1), **kwargs}
        expected = {"translator_peer_distance": "batch-level signal; needs add_translator_signal", **expected}
    for cs in compute_signals(PALI, [ENGLISH] * n, **kwargs):
        assert set(cs.signals) == set(SIGNAL_NAMES)
        skipped = {k: r.reason for k, r in cs.signals.items() if isinstance(r, SignalSkipped)}
        assert skipped == expected


def test_a_letterless_source_skips_the_length_ratio() -> None:
    (cs,) = compute_signals("12 … 34", [ENGLISH], length_model=LM)
    for name in ("length_ratio_z", "length_ratio_short_z"):
        res = cs.signals[name]
        assert isinstance(res, SignalSkipped) and res.reason == "the source has no letters"


def test_signal_names_are_the_families_names_once_each() -> None:
    # risk models name these signals: renaming or dropping one breaks stored models
    assert sorted(SIGNAL_NAMES) == sorted(
        [
            "source_distance",
            "length_ratio_z",
            "length_ratio_short_z",
            "source_copy_share",
            "novelty",
            *PEER_SIGNALS,
        ]
    )
    assert sorted(PEER_SIGNALS) == sorted(
        [
            "peer_centroid_distance",
            "peer_centroid_z",
            "peer_mean_distance",
            "peer_knn_distance",
            "peer_chrf_risk",
            "peer_length_z",
            "peer_length_short_z",
            "source_distance_peer_z",
            "translator_peer_distance",
        ]
    )
    assert len(set(SIGNAL_NAMES)) == len(SIGNAL_NAMES)
    assert all(set(f.peer_names) <= set(f.names) for f in FAMILIES)


class _Forgetful:
    names = ("source_distance", "extra")
    peer_names: tuple[str, ...] = ()

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        return [{"source_distance": SignalValue(value=0.0)} for _ in passage.candidates]


def test_a_family_that_omits_one_of_its_signals_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compute_module, "FAMILIES", (_Forgetful(),))
    with pytest.raises(RuntimeError, match="_Forgetful returned"):
        compute_signals(PALI, [ENGLISH, ENGLISH])


# three passages with letter ratios 1, 2 and 1/2: log ratios 0, ln 2, -ln 2 -> mean 0, sd ln 2
LM = fit_length_model(
    [("a" * 10, "b" * 10), ("a" * 10, "b" * 20), ("a" * 10, "b" * 5)],
    source_lang="pli",
    target_lang="en",
    built_from="t",
)


def test_fit_length_model_table() -> None:
    assert LM.mean == pytest.approx(0.0, abs=TOL)
    assert LM.sd == pytest.approx(math.log(2), abs=TOL)
    assert LM.n == 3


@pytest.mark.parametrize(
    ("cand_letters", "abs_z", "short_z"),
    [
        (20, 1.0, 0.0),
        (10, 0.0, 0.0),
        (5, 1.0, 1.0),
        (40, 2.0, 0.0),
        (0, math.log(10) / math.log(2), math.log(10) / math.log(2)),
    ],
)
def test_length_ratio_signal(cand_letters: int, abs_z: float, short_z: float) -> None:
    (cs,) = compute_signals("a" * 10, ["b" * cand_letters], length_model=LM)
    assert value(cs.signals["length_ratio_z"]) == pytest.approx(abs_z, abs=TOL)
    assert value(cs.signals["length_ratio_short_z"]) == pytest.approx(short_z, abs=TOL)


def test_letter_count_ignores_spaces_digits_punctuation() -> None:
    assert letter_count("Saṁ 12, ā!") == 4  # S a ṁ ā (ṁ precomposed)
    assert isinstance(LM, LengthModel)


def rules(source: str, candidate: str, target_lang: str = "en") -> set[str]:
    return {f.rule for f in candidate_flags(source, candidate, source_lang="pli", target_lang=target_lang)}


@pytest.mark.parametrize(
    ("candidate", "target_lang", "expected"),
    [
        (ENGLISH, "en", set()),
        (PALI, "en", {"source_copy"}),  # the whole source copied
        (PALI.replace("ṁ", "ṃ"), "en", {"source_copy"}),  # copied from another edition's spelling
        ("So I heard: " + PALI, "en", {"source_copy"}),
        ("", "en", {"empty_output"}),
        ("  … ,, 12 ", "en", {"empty_output"}),
        ('{"mn1:1.1": "So I have heard."}', "en", {"json_debris"}),
        ('"mn1:1.1": "So I have heard. At one time the Buddha was staying near Sāvatthī."', "en", {"json_debris"}),
        ("```\nSo I have heard. At one time the Buddha was staying near Sāvatthī.\n```", "en", {"json_debris"}),
        ("Так я слышал. Однажды Благословенный пребывал в Саваттхи.", "en", {"wrong_script"}),
        ("एवं मे सुतं। एकं समयं भगवा सावत्थियं विहरति।", "en", {"wrong_script"}),
        (ENGLISH, "zh", {"wrong_script"}),
        ("如是我闻。一时佛在舍卫国祇树给孤独园。", "zh", set()),
        ("Here is the translation: So I have heard.", "en", {"prompt_echo"}),
        ("So I have heard (at one time the Buddha was staying near Sāvatthī.", "en", {"unbalanced_brackets"}),
    ],
)
def test_hard_flags(candidate: str, target_lang: str, expected: set[str]) -> None:
    assert rules(PALI, candidate, target_lang) == expected


def test_partial_copy_is_flagged() -> None:
    source = PALI + " Tatra kho bhagavā bhikkhū āmantesi bhikkhavoti. Bhadanteti te bhikkhū bhagavato paccassosuṁ."
    cand = (
        "So I have heard. At one time the Buddha was staying near Sāvatthī. Tatra kho bhagavā bhikkhū āmantesi "
        "bhikkhavoti bhadanteti te bhikkhū bhagavato paccassosuṁ. Then he said this."
    )
    flags = candidate_flags(source, cand)
    assert [f.rule for f in flags] == ["partial_source_copy"]
    assert flags[0].severity == "major"


def test_generation_loop_is_flagged() -> None:
    source = PALI * 2
    loop = ENGLISH + " " + "from a place where there is a boot, " * 40
    assert "repetition_loop" in rules(source, loop)
    # a faithful translation of a repetitive source is not a loop: the source repeats the same way
    assert "repetition_loop" not in rules(PALI * 8, ENGLISH * 8)


def test_flags_severity_of_copy_and_empty_is_critical() -> None:
    assert {f.severity for f in candidate_flags(PALI, PALI)} == {"critical"}
    assert {f.severity for f in candidate_flags(PALI, "")} == {"critical"}


def test_flags_are_attached_to_compute_signals_output() -> None:
    out = compute_signals(PALI, [ENGLISH, PALI], candidate_models=["good", "copier"])
    assert out[0].flags == [] and out[0].model == "good"
    assert [f.rule for f in out[1].flags] == ["source_copy"]
    assert value(out[1].signals["source_copy_share"]) == pytest.approx(1.0, abs=TOL)


def test_novelty_is_passed_through() -> None:
    nov = SignalValue(value=0.42)
    out = compute_signals(PALI, [ENGLISH, ENGLISH], novelty=nov)
    assert all(cs.signals["novelty"] == nov for cs in out)


def _passage(values: dict[str, float]) -> list[CandidateSignals]:
    return [
        CandidateSignals(signals={"peer_centroid_distance": SignalValue(value=v)}, flags=[], model=m)
        for m, v in values.items()
    ]


@pytest.mark.parametrize(
    ("passages", "expected"),
    [
        # medians 0.2 and 0.5: A is +0.1 and +0.3 above them -> 0.2; B 0 and 0 -> 0; C -0.1 and -0.2 -> -0.15
        ([{"A": 0.3, "B": 0.2, "C": 0.1}, {"A": 0.8, "B": 0.5, "C": 0.3}], {"A": 0.2, "B": 0.0, "C": -0.15}),
        ([{"A": 0.5, "B": 0.5}, {"A": 0.1, "B": 0.3}], {"A": -0.05, "B": 0.05}),
    ],
)
def test_translator_signal_table(passages: list[dict[str, float]], expected: dict[str, float]) -> None:
    batch = [_passage(p) for p in passages]
    add_translator_signal(batch, min_passages=2)
    for cs in batch[0]:
        assert value(cs.signals["translator_peer_distance"]) == pytest.approx(expected[cs.model], abs=TOL)


def test_translator_signal_needs_enough_passages() -> None:
    batch = [_passage({"A": 0.3, "B": 0.2})]
    add_translator_signal(batch, min_passages=2)
    res = batch[0][0].signals["translator_peer_distance"]
    assert isinstance(res, SignalSkipped) and "needs 2" in res.reason
