"""The word-level error detector: synthetic corruptions and their tags, features, the shipped model, the cheap tier."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest

from service.core.critical.build_glossary import Segment
from service.core.critical.build_lexicon import held_out
from service.core.critical.renderings import LEXICON_FILE, TranslationLexicon, load_translation_lexicon
from service.core.detector.build import featurize, read_exclusions, training_chunks
from service.core.detector.features import WORD_FEATURES, candidate_view, source_view, word_features
from service.core.detector.model import (
    DETECTOR_FILE,
    RULE_WORD,
    SIGNALS,
    Detector,
    DetectorFile,
    Linear,
    expand,
    load_detector,
)
from service.core.detector.synth import Chunk, _Terms, corrupt, synthesize
from service.core.types import SignalValue

PLI = (
    "Cattārimāni, bhikkhave, ariyasaccāni.",
    "Katamāni cattāri?",
    "Dukkhaṃ ariyasaccaṃ, dukkhasamudayaṃ ariyasaccaṃ.",
    "Rūpaṃ aniccaṃ, na taṃ mama.",
)
EN = (
    "Mendicants, there are four noble truths.",
    "What four?",
    "The noble truth of suffering, the noble truth of the origin of suffering.",
    "Form is impermanent, that is not mine.",
)
CHUNK = Chunk("sn56.99", PLI, EN)
SRC = " ".join(PLI)
GOOD = " ".join(EN)


@pytest.fixture(scope="module")
def lexicon() -> TranslationLexicon:
    return load_translation_lexicon(LEXICON_FILE)


@pytest.fixture(scope="module")
def detector(lexicon: TranslationLexicon) -> Detector:
    return load_detector(lexicon, DETECTOR_FILE)


def test_corruptions_tag_the_words_they_change(lexicon: TranslationLexicon) -> None:
    terms = _Terms(lexicon)
    names = ["Sāriputta"]
    for etype, variant in [("term", "related"), ("term", "unlicensed"), ("number", "one"), ("negation", "added")]:
        pair = None
        for seed in range(20):
            pair = corrupt(CHUNK, etype, variant, random.Random(seed), terms, names, "Something else.")
            if pair is not None:
                break
        assert pair is not None, (etype, variant)
        assert pair.label and pair.target != GOOD and pair.bad_words and not pair.missing
        for a, b in pair.bad_words:
            word = pair.target[a:b]
            assert word.isalpha(), (etype, word)
            # the tagged word is what changed: the clean text does not say it at that place
            assert GOOD[a:b] != word, (etype, variant, word)
    added = corrupt(CHUNK, "addition", "last", random.Random(0), terms, names, "Rain fell on the hills.")
    assert added is not None
    assert [added.target[a:b] for a, b in added.bad_words] == ["Rain", "fell", "on", "the", "hills"]


def test_an_omission_marks_the_source_clauses_left_untranslated(lexicon: TranslationLexicon) -> None:
    pair = corrupt(CHUNK, "omission", "middle", random.Random(1), _Terms(lexicon), [], "")
    assert pair is not None and not pair.bad_words
    dropped = [seg for seg in EN if seg not in pair.target]
    assert len(dropped) == 1
    pali = PLI[EN.index(dropped[0])]
    missing = " ".join(pair.source[a:b] for a, b in pair.missing)
    assert missing.split() == pali.split()  # the dropped segment's clauses, and nothing of its neighbours
    assert pair.source == SRC


def test_synthesis_is_seeded(lexicon: TranslationLexicon) -> None:
    chunks = [CHUNK, Chunk("sn56.98", PLI[::-1], EN[::-1])]
    one = synthesize(chunks, lexicon, seed=3, draws=2)
    two = synthesize(chunks, lexicon, seed=3, draws=2)
    assert [(p.target, p.bad_words, p.missing) for p in one] == [(p.target, p.bad_words, p.missing) for p in two]
    assert sum(not p.label for p in one) == 2


def test_excluded_suttas_never_reach_the_training_data(tmp_path: Path) -> None:
    ids = [t for t in (f"sn{k}.{j}" for k in range(1, 60) for j in range(1, 30)) if held_out(t)][:12]
    segs = [Segment("sujato", t, f"{t}:{i}.1", p, e) for t in ids for i, (p, e) in enumerate(zip(PLI, EN, strict=True))]
    listed = tmp_path / "exclude.txt"
    listed.write_text(f"# dev suttas\n{ids[0]}\n\n{ids[1]}  # a comment\n")
    exclude = read_exclusions(listed)
    assert exclude == {ids[0], ids[1]}
    train, test = training_chunks(segs, exclude, seed=1)
    seen = {c.text_id for c in train + test}
    assert seen and not seen & exclude
    assert {c.text_id for c in train}.isdisjoint({c.text_id for c in test})
    everything, _ = training_chunks(segs, set(), seed=1)
    assert len(everything) + len(_) > len(train) + len(test)


def test_features_see_a_word_the_source_does_not_license(lexicon: TranslationLexicon) -> None:
    src = source_view(SRC, lexicon)
    good, bad = candidate_view(GOOD), candidate_view(GOOD.replace("impermanent", "delicious"))
    fg, fb = word_features(src, good, lexicon), word_features(src, bad, lexicon)
    k = good.stems.index("impermanent")
    unlinked = WORD_FEATURES.index("unlinked")
    assert fg[k, unlinked] == 0.0 and fb[k, unlinked] == 1.0
    rows = featurize(synthesize([CHUNK], lexicon, seed=1, draws=3), lexicon)
    assert rows[0].shape[1] == len(WORD_FEATURES) and rows[1].any()


def test_a_linear_model_reads_the_features_it_was_given() -> None:
    z = np.array([[1.0, 2.0], [0.0, -1.0]])
    assert expand(z, 2).tolist() == [[1.0, 2.0, 1.0, 2.0, 4.0], [0.0, -1.0, 0.0, -0.0, 1.0]]
    m = Linear(features=["a", "b"], mean=[0.0, 0.0], scale=[1.0, 2.0], coef=[1.0, 0.0], intercept=0.0)
    assert m.prob(np.array([[0.0, 5.0]]))[0] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="rebuild"):
        Detector(DetectorFile(signature={}, word=m, clause=m), load_translation_lexicon(LEXICON_FILE))


def test_shipped_detector_flags_added_words_and_a_dropped_sentence(detector: Detector) -> None:
    sig = detector.signature
    assert sig["lexicon"] == detector.lexicon.id and "held_apart" in sig and "excluded" in sig
    added = GOOD + " The king of Kosala rode his elephant to the river at dawn."
    dropped = " ".join(EN[:2] + EN[3:])
    good, add, drop = detector.assess(SRC, [GOOD, added, dropped])
    assert add.word_error > good.word_error
    tail = [p for a, _, p in add.words if a >= len(GOOD)]
    head = [p for a, _, p in add.words if a < len(GOOD)]
    assert max(tail) > max(head)
    assert drop.missing > good.missing
    # findings carry spans into the candidate, on the words they name
    flag = next((f for f in add.flags if f.rule == RULE_WORD), None)
    assert flag is not None and flag.spans
    assert all(s.start >= len(GOOD) for s in flag.spans)
    values = detector.signals(add)
    assert set(values) == set(SIGNALS) and all(isinstance(v, SignalValue) for v in values.values())


def test_the_detector_refuses_an_artifact_of_another_lexicon(detector: Detector, tmp_path: Path) -> None:
    import msgspec

    data = msgspec.structs.replace(detector.data, signature={**detector.signature, "lexicon": "another"})
    path = tmp_path / "d.json"
    path.write_bytes(msgspec.json.encode(data))
    with pytest.raises(ValueError, match="built with lexicon another"):
        load_detector(detector.lexicon, path)


def test_the_cheap_tier_adds_the_detector_only_when_given_one(detector: Detector) -> None:
    from service.core.critical import CriticalChecker
    from service.core.novelty_report import NoveltySkipped
    from service.core.pipeline import cheap_tier
    from service.core.records import DEFAULT_CHECKS, CandidateIn
    from service.core.risk import RiskRegistry
    from service.platform.settings import get_settings

    added = GOOD + " The king of Kosala rode his elephant to the river at dawn."
    cands = [CandidateIn(id="a", text=GOOD), CandidateIn(id="b", text=added)]
    common = {
        "source_text": SRC,
        "source_lang": "pli",
        "target_lang": "en",
        "candidates": cands,
        "checks": DEFAULT_CHECKS,
        "novelty": NoveltySkipped(reason="test"),
        "peer_embedder": None,
        "source_embedder": None,
        "embedder_signature": {},
        "length_model": None,
        "critical": CriticalChecker(translation=False),
        "registry": RiskRegistry.load(get_settings().risk.models_dir),
    }
    off = cheap_tier(**common)  # type: ignore[arg-type]
    on = cheap_tier(**common, detector=detector)  # type: ignore[arg-type]
    assert not set(SIGNALS) & set(off.candidates["b"].signals)
    sig = on.candidates["b"].signals[SIGNALS[0]]
    assert isinstance(sig, SignalValue) and sig.detail == {"detector": detector.id}
    good = on.candidates["a"].signals[SIGNALS[0]]
    assert isinstance(good, SignalValue) and sig.value > good.value
    assert any(f.rule == RULE_WORD for f in on.candidates["b"].flags)
    assert not any(f.rule == RULE_WORD for f in off.candidates["b"].flags)


def test_a_missing_clause_is_marked_where_it_would_be(detector: Detector) -> None:
    from service.core.detector.model import place

    dropped = " ".join(EN[:2] + EN[3:])  # the truths of suffering and its origin left out
    rep, good = detector.assess(SRC, [dropped, GOOD])
    k = max(range(len(rep.clauses)), key=lambda k: rep.clauses[k][2])
    a, b, p = rep.clauses[k]
    assert "Dukkhaṃ" in SRC[a:b] or "dukkhasamudayaṃ" in SRC[a:b]
    assert p > 3 * good.clauses[k][2]
    # after "What four?", before "Form is impermanent"
    at = place(detector.view(SRC), candidate_view(dropped), k)
    assert dropped.index("What four") + len("What four") <= at <= dropped.index("Form")
    assert place(detector.view(SRC), candidate_view(dropped), 0) == 0
