"""Corpus ingest: segment ordering, passage grouping, titles, filters and the profile table, JSONL."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from service.core.corpus import (
    FilterRules,
    Passage,
    apply_filters,
    group_segments,
    load_bilara,
    load_jsonl,
    natural_key,
    passage_id_of,
)
from service.platform.errors import InputError


@pytest.mark.parametrize(
    ("key", "passage"),
    [("mn1:1.10", "mn1:1"), ("an1.1:2.3", "an1.1:2"), ("vv33:1.0.1", "vv33:1.0"), ("dn1:0.1", "dn1:0"), ("x", "x")],
)
def test_passage_id_of(key: str, passage: str) -> None:
    assert passage_id_of(key) == passage


def test_segments_in_true_order_and_titles_dropped() -> None:
    keys = ["mn1:1.1", "mn1:1.2", "mn1:1.9", "mn1:1.10", "mn1:1.11", "mn1:2.1", "mn1:10.1", "mn1:0.1", "mn1:0.2"]
    shuffled = keys[:]
    random.Random(7).shuffle(shuffled)
    grouped = group_segments({k: k for k in shuffled})
    assert list(grouped) == ["mn1:1", "mn1:2", "mn1:10"]
    assert grouped["mn1:1"] == ["mn1:1.1", "mn1:1.2", "mn1:1.9", "mn1:1.10", "mn1:1.11"]


def test_natural_key_orders_texts() -> None:
    assert sorted(["an1.10", "an1.2", "an1.1", "an10.1"], key=natural_key) == ["an1.1", "an1.2", "an1.10", "an10.1"]


def _write_bilara(root: Path) -> None:
    src = root / "root" / "pli" / "ms" / "sutta" / "xx"
    tr = root / "translation" / "en" / "tester" / "sutta" / "xx"
    src.mkdir(parents=True)
    tr.mkdir(parents=True)
    pali = {
        "xx1:0.1": "Title",
        "xx1:1.2": "dutiyaṁ vākyaṁ",
        "xx1:1.10": "dasamaṁ vākyaṁ",
        "xx1:1.1": "paṭhamaṁ vākyaṁ",
        "xx1:2.1": "aññaṁ",
    }
    (src / "xx1_root-pli-ms.json").write_text(json.dumps(pali), encoding="utf-8")
    english = {"xx1:1.1": "first", "xx1:1.2": "second", "xx1:1.10": "tenth"}
    (tr / "xx1_translation-en-tester.json").write_text(json.dumps(english), encoding="utf-8")


def test_load_bilara_joins_in_segment_order(tmp_path: Path) -> None:
    _write_bilara(tmp_path)
    passages = load_bilara(tmp_path, translation_dir=tmp_path / "translation" / "en" / "tester")
    assert [p.id for p in passages] == ["xx1:1", "xx1:2"]
    assert passages[0].text == "paṭhamaṁ vākyaṁ dutiyaṁ vākyaṁ dasamaṁ vākyaṁ"
    assert passages[0].translation == "first second tenth"
    assert passages[0].translated_segments == 3
    assert passages[1].translated_segments == 0


def _p(pid: str, text: str, translation: str | None, covered: int | None, segments: int = 1) -> Passage:
    return Passage(
        id=pid,
        text=text,
        lang="pli",
        segments=[f"s{i}" for i in range(segments)],
        translation=translation,
        translated_segments=covered,
    )


def test_filters_and_profile_counts() -> None:
    long_text = " ".join(["dhammaṃ"] * 12)
    passages = [
        _p("ok", long_text, "x" * len(long_text), 2, 2),
        _p("short", "dhammaṃ desessāmi", "I will teach", 1),
        _p("partial", long_text, "x" * len(long_text), 1, 2),
        _p("ratio", long_text, "x" * (3 * len(long_text)), 1),
        _p("none", long_text, "", 0),
    ]
    reasons, profile = apply_filters(passages, FilterRules())
    assert reasons == [
        [],
        ["too_few_content_tokens"],
        ["incomplete_translation"],
        ["char_ratio_out_of_bounds"],
        ["no_translation"],
    ]
    assert profile.removed == {
        "no_translation": 1,
        "too_few_content_tokens": 1,
        "incomplete_translation": 1,
        "char_ratio_out_of_bounds": 1,
    }
    assert profile.kept == 1
    assert "kept" in profile.table()


def test_load_jsonl(tmp_path: Path) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text('{"id": "a", "text": "dharmaḥ", "lang": "san"}\n\n{"id": "b", "text": "x", "lang": "san"}\n')
    assert [(p.id, p.lang) for p in load_jsonl(path)] == [("a", "san"), ("b", "san")]
    path.write_text('{"id": "a", "text": "x", "lang": "san"}\n{"id": "a", "text": "y", "lang": "san"}\n')
    with pytest.raises(InputError, match="duplicate"):
        load_jsonl(path)
    path.write_text('{"id": "a"}\n')
    with pytest.raises(InputError, match=r"line|:1"):
        load_jsonl(path)
