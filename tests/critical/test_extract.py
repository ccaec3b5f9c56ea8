"""Extraction tables: Pali and English numbers, negators and names."""

from __future__ import annotations

import pytest

from service.core.critical import CriticalChecker


@pytest.fixture(scope="module")
def checker() -> CriticalChecker:
    return CriticalChecker()


@pytest.mark.parametrize(
    ("word", "value"),
    [
        ("pañca", 5),
        ("pañcime", 5),
        ("catūhi", 4),
        ("dasa", 10),
        ("tīṇi", 3),
        ("cattāro", 4),
        ("chahi", 6),
        ("aṭṭhaṅgiko", 8),
        ("dutiyampi", 2),
        ("tatiyampi", 3),
        ("tikkhattuṃ", 3),
        ("pañcamaṃ", 5),
        ("sattannaṃ", 7),
        ("Pañcime", 5),
        ("catutthaṃ", 4),
        ("saḷāyatanaṃ", 6),
        ("dvādasa", 12),
    ],
)
def test_pali_numbers(checker: CriticalChecker, word: str, value: int) -> None:
    assert value in checker.extractor.pali(f"idha {word} bhikkhave").numbers


@pytest.mark.parametrize(("word", "value"), [("sattahi", 7), ("nava", 9), ("bhikkhusatehi", 100)])
def test_pali_ambiguous_numbers_are_weak(checker: CriticalChecker, word: str, value: int) -> None:
    c = checker.extractor.pali(word)
    assert value in c.numbers_weak and value not in c.numbers


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("these five hindrances", 5),
        ("the seventh day", 7),
        ("Seven years", 7),
        ("for 12 years", 12),
        ("a hundred monks", 100),
        ("the noble eightfold path", 8),
        ("four kinds", 4),
    ],
)
def test_english_numbers(checker: CriticalChecker, text: str, value: int) -> None:
    assert value in checker.extractor.english(text).numbers


def test_english_one_is_not_a_number(checker: CriticalChecker) -> None:
    assert not checker.extractor.english("At one time the Blessed One was staying").numbers


@pytest.mark.parametrize(
    ("text", "count"),
    [("na kho", 1), ("mā evaṃ", 1), ("natthi dukkhaṃ", 1), ("neva saññā nāsaññā", 1), ("netaṃ mama", 1), ("sukhaṃ", 0)],
)
def test_pali_negators(checker: CriticalChecker, text: str, count: int) -> None:
    assert checker.extractor.pali(text).neg == count


@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("This is not mine", 1),
        ("He never returns", 1),
        ("I don't know", 1),
        ("without clinging", 1),
        ("It cannot be", 1),
        ("neither this nor that", 2),
        ("no one", 1),
        ("It is impermanent", 0),
    ],
)
def test_english_negators(checker: CriticalChecker, text: str, count: int) -> None:
    assert checker.extractor.english(text).neg == count


@pytest.mark.parametrize(
    ("pali", "english"),
    [
        ("āyasmā sāriputto", "Venerable Sāriputta"),
        ("sāvatthiyaṃ viharati", "staying near Savatthi"),
        ("ānandaṃ āmantesi", "addressed Ānanda"),
        ("rājagahe", "at Rājagaha"),
        ("mahāmoggallāno", "Moggallāna"),
    ],
)
def test_names_meet_on_both_sides(checker: CriticalChecker, pali: str, english: str) -> None:
    src = checker.extractor.pali(pali).names
    assert src
    rep = checker.check(pali, english, [])
    assert rep.signals["name_mismatch"].value == 0.0  # type: ignore[union-attr]


def test_list_sizes(checker: CriticalChecker) -> None:
    assert checker.extractor.pali("Pañcime, bhikkhave, nīvaraṇā").lists == {5}
    assert checker.extractor.english("there are these five hindrances").lists == {5}
