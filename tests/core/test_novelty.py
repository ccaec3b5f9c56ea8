"""Novelty components on a hand-made corpus with hand-computed values, the combination, queries and persistence."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from sklearn.feature_extraction.text import TfidfVectorizer

from service.core.corpus import FilterRules, Passage
from service.core.novelty import COMPONENTS, IndexParams, NoveltyIndex, build_index, combine
from service.platform.errors import InputError, NotFound

TEXTS = {
    "a:1": "Dhamma sangha buddha nibbana.",
    "b:1": "dhamma, sangha, buddha: vinaya",
    "c:1": "kusala akusala citta ca",  # 'ca' is a particle and too short
}
# rare words: df <= 1; rare char 5-grams: df <= 1; formulas: word 2-3-grams in >= 2 passages; 1 neighbour
PARAMS = IndexParams(
    rare_word_max_df=1,
    rare_char_max_df=1,
    formula_min_n=2,
    formula_max_n=3,
    formula_min_df=2,
    neighbours=1,
    filters=FilterRules(min_content_tokens=0),
)


@pytest.fixture(scope="module")
def tiny() -> NoveltyIndex:
    return build_index([Passage(id=k, text=v, lang="pli") for k, v in TEXTS.items()], params=PARAMS, name="tiny")


# Hand computation. Normalised strings: A "dhamma sangha buddha nibbana" (28 chars, 24 5-grams),
# B "dhamma sangha buddha vinaya" (27 chars, 23 5-grams), C "kusala akusala citta" (20 chars, 16 5-grams).
# A and B share the 21-char prefix "dhamma sangha buddha ", i.e. 17 5-grams; the rest occur in one passage only.
# Words: dhamma, sangha, buddha have df 2; nibbana, vinaya, kusala, akusala, citta df 1.
# Formulas: A and B share "dhamma sangha", "sangha buddha" and "dhamma sangha buddha" (3 each); C none.
EXPECTED_RAW = {
    "a:1": {"rare_words": 1 / 4, "rare_char5": 7 / 24, "formulas": 3.0},
    "b:1": {"rare_words": 1 / 4, "rare_char5": 6 / 23, "formulas": 3.0},
    "c:1": {"rare_words": 3 / 3, "rare_char5": 16 / 16, "formulas": 0.0},
}


@pytest.mark.parametrize("pid", list(TEXTS))
@pytest.mark.parametrize("component", ["rare_words", "rare_char5", "formulas"])
def test_components_match_hand_computation(tiny: NoveltyIndex, pid: str, component: str) -> None:
    assert tiny.passage(pid).raw[component] == pytest.approx(EXPECTED_RAW[pid][component], abs=1e-9)


def test_neighbour_similarity_is_exact_tfidf_cosine(tiny: NoveltyIndex) -> None:
    # sklearn's char 3-5-gram TF-IDF (smooth idf, l2) over the same normalised strings is the reference
    strings = ["dhamma sangha buddha nibbana", "dhamma sangha buddha vinaya", "kusala akusala citta"]
    x = TfidfVectorizer(analyzer="char", ngram_range=(3, 5), lowercase=False).fit_transform(strings)
    sims = (x @ x.T).toarray()
    np.fill_diagonal(sims, -1)
    for row, pid in enumerate(TEXTS):
        result = tiny.passage(pid)
        assert result.raw["neighbour_sim"] == pytest.approx(max(sims[row].max(), 0.0), abs=1e-5)
    assert tiny.passage("a:1").neighbours[0].passage_id == "b:1"


def test_z_scores_and_combination(tiny: NoveltyIndex) -> None:
    # rare_words over the corpus: [0.25, 0.25, 1.0] -> mean 0.5, population sd sqrt(0.125)
    assert tiny.passage("c:1").z["rare_words"] == pytest.approx(0.5 / math.sqrt(0.125), abs=1e-9)
    for pid in TEXTS:
        r = tiny.passage(pid)
        assert r.index == pytest.approx(combine(r.z), abs=1e-9)
    # the unrelated, formula-free passage is the most novel
    assert max(TEXTS, key=lambda p: tiny.passage(p).index) == "c:1"


@pytest.mark.parametrize(
    ("z", "expected"),
    [
        ({"rare_words": 1.0, "rare_char5": 1.0, "formulas": 1.0, "neighbour_sim": 1.0}, 0.0),
        ({"rare_words": 2.0, "rare_char5": 0.0, "formulas": 0.0, "neighbour_sim": 0.0}, 0.5),
        ({"rare_words": 0.0, "rare_char5": 0.0, "formulas": 1.0, "neighbour_sim": 3.0}, -1.0),
        ({"rare_words": 1.0, "rare_char5": -1.0, "formulas": -2.0, "neighbour_sim": 2.0}, 0.0),
    ],
)
def test_combination_formula(z: dict[str, float], expected: float) -> None:
    assert combine(z) == pytest.approx(expected)


def test_new_text_counts_itself_once(tiny: NoveltyIndex) -> None:
    # dhamma/sangha: df 2 + 1 -> common; moggallana: 0 + 1 -> rare. Bigram "dhamma sangha": 2 + 1 >= 2 -> formula.
    r = tiny.score("dhamma sangha moggallana")
    assert r.source == "computed"
    assert r.raw["rare_words"] == pytest.approx(1 / 3)
    assert r.raw["formulas"] == 1.0
    assert set(r.z) == set(COMPONENTS)


def test_corpus_text_gets_stored_values(tiny: NoveltyIndex) -> None:
    r = tiny.score("DHAMMA sangha — buddha; nibbana")  # same content tokens as a:1
    assert r.source == "corpus"
    assert r.passage_id == "a:1"


def test_text_without_content_words_is_refused(tiny: NoveltyIndex) -> None:
    with pytest.raises(InputError):
        tiny.score("ca pi vā …")


def test_unknown_passage(tiny: NoveltyIndex) -> None:
    with pytest.raises(NotFound):
        tiny.passage("zz:9")


def test_save_load_roundtrip(tiny: NoveltyIndex, tmp_path: Path) -> None:
    loaded = NoveltyIndex.load(tiny.save(tmp_path / "tiny.trisk"))
    assert loaded.signature == tiny.signature
    assert loaded.params == tiny.params
    for pid in TEXTS:
        assert loaded.passage(pid).index == pytest.approx(tiny.passage(pid).index)
    assert loaded.score("dhamma sangha moggallana").index == pytest.approx(tiny.score("dhamma sangha moggallana").index)


def test_signature_records_corpus_and_parameters(tiny: NoveltyIndex) -> None:
    sig = tiny.signature
    assert len(str(sig["corpus_sha256"])) == 64
    assert sig["params"]["rare_word_max_df"] == 1  # type: ignore[index]
    assert "numpy" in sig["libraries"]  # type: ignore[operator]
    other = build_index([Passage(id=k, text=v + " extra", lang="pli") for k, v in TEXTS.items()], params=PARAMS)
    assert other.signature["id"] != sig["id"]


def test_empty_corpus_is_refused() -> None:
    with pytest.raises(InputError):
        build_index([], params=PARAMS)


def test_an_index_is_verified_against_its_signature_when_loaded(sn12_index: NoveltyIndex, tmp_path: Path) -> None:
    """The signature covers the content: a file whose arrays changed after the build is refused, and so is a file
    of another build than TRISK_INDEX_SIGNATURE pins; the good file loads (API and workers load through here)."""
    from service.core.novelty import load_indexes

    good = sn12_index.save(tmp_path / "good.trisk")
    assert sn12_index.signature["content_sha256"] == sn12_index.content_digest()
    loaded, errors = load_indexes(str(good), sn12_index.signature_id)
    assert errors == {} and loaded["pli"].signature_id == sn12_index.signature_id
    _, errors = load_indexes(str(good), "0123456789abcdef")
    assert "TRISK_INDEX_SIGNATURE pins 0123456789abcdef" in errors[str(good)]
    # one number of the stored novelty changed, the signature left as it was
    tampered = NoveltyIndex.load(good)
    tampered.novelty[0] += 0.5
    bad = tampered.save(tmp_path / "bad.trisk")
    loaded, errors = load_indexes(str(bad))
    assert loaded == {} and "does not match signature" in errors[str(bad)]
