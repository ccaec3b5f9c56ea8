"""The one PaliBench loader on a hand-made folder (and, when the shared data is there, on the dev half)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from service.core.palibench import BILARA_ROOT, DEV_DIR, load_palibench


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")


EXTRA_MODELS = [f"m{k}-{c}" for k, c in enumerate("qwertyui")]


@pytest.fixture
def folder(tmp_path: Path) -> tuple[Path, Path]:
    bench, root = tmp_path / "bench", tmp_path / "root"
    _write(
        root / "sutta" / "sn" / "sn1.1_root-pli-ms.json",
        {"sn1.1:1.1": " Evaṃ me sutaṃ. ", "sn1.1:1.2": "  ", "sn1.1:1.3": "Ekaṃ samayaṃ", "sn1.1:2.1": "Atha kho"},
    )
    _write(root / "vinaya" / "pli-tv-kd1_root-pli-ms.json", {"pli-tv-kd1:1.1": "Tena samayena"})
    (bench / "translations").mkdir(parents=True)
    (bench / "passage_manifest.csv").write_text(
        "passage_id,collection,sutta_id,segment_count,segments\n"
        "sn1.1:1,SN,sn1.1,3,sn1.1:1.3 sn1.1:1.1 sn1.1:1.2\n"  # manifest order of segments is kept; empty one left out
        "sn1.1:2,SN,sn1.1,1,sn1.1:2.1\n"
        "pli-tv-kd1:1,VIN,pli-tv-kd1,1,pli-tv-kd1:1.1\n",
        encoding="utf-8",
    )
    _write(bench / "translations" / "zz-model.json", {"metadata": {}, "translations": {"sn1.1:1": "Thus."}})
    for m in reversed(EXTRA_MODELS):
        _write(bench / "translations" / f"{m}.json", {"metadata": {"model": m}, "translations": {}})
    _write(
        bench / "translations" / "aa-model_reasoning-none.json",
        {"metadata": {"model": "aa/model"}, "translations": {"sn1.1:1": "So I heard.", "sn1.1:2": "Then."}},
    )
    _write(
        bench / "per_passage_scores" / "aa-model_reasoning-none_per_passage_scores.json",
        [
            {"passage_id": "sn1.1:1", "normalized_drift": 2.0, "comet_best": 0.8},
            {"passage_id": "sn1.1:2", "normalized_drift": 2.5, "comet_best": 0.6},
        ],
    )
    return bench, root


def test_loads_sources_translations_and_reference_scores(folder: tuple[Path, Path]) -> None:
    pb = load_palibench(*folder)
    assert pb.passage_ids == ["sn1.1:1", "sn1.1:2", "pli-tv-kd1:1"]
    assert [p.source for p in pb.passages] == ["Ekaṃ samayaṃ Evaṃ me sutaṃ.", "Atha kho", "Tena samayena"]
    assert (pb.passages[0].sutta, pb.passages[0].collection) == ("sn1.1", "SN")
    # sorted file stems, whatever order the directory lists them in
    assert pb.models == ["aa-model_reasoning-none", *EXTRA_MODELS, "zz-model"]
    assert pb.model_names["aa-model_reasoning-none"] == "aa/model" and pb.model_names["zz-model"] == "zz-model"
    assert pb.translations["zz-model"] == {"sn1.1:1": "Thus."}
    scores = pb.scores["aa-model_reasoning-none"]
    # PaliBench's outlier is drift strictly above 2
    assert [(s.normalized_drift, s.comet_best, s.outlier) for s in scores.values()] == [
        (2.0, 0.8, False),
        (2.5, 0.6, True),
    ]
    assert pb.scores["zz-model"] == {}


def test_limit_and_missing_root_file(folder: tuple[Path, Path]) -> None:
    bench, root = folder
    assert load_palibench(bench, root, limit=1).passage_ids == ["sn1.1:1"]
    (root / "vinaya" / "pli-tv-kd1_root-pli-ms.json").unlink()
    with pytest.raises(FileNotFoundError, match="pli-tv-kd1"):
        load_palibench(bench, root)


@pytest.mark.skipif(not (DEV_DIR / "passage_manifest.csv").exists(), reason="no shared PaliBench dev half")
def test_the_dev_half() -> None:
    pb = load_palibench(DEV_DIR, BILARA_ROOT)
    assert len(pb.passages) == 763 and len(pb.models) == 10
    assert all(p.source for p in pb.passages)
    assert sum(s.outlier for m in pb.models for s in pb.scores[m].values()) == 950  # the fit's 950 outliers
