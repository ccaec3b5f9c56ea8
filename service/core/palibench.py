"""The one PaliBench loader: passages with their Pali sources joined from bilara, every model's translations, and the
reference-based scores (labels for measuring only, never an input to a risk score).

Layout (``../shared/palibench-dev``, see the shared README): ``passage_manifest.csv`` (passage id, collection,
sutta id, the passage's segment keys in order), ``translations/<model>.json`` (``{"metadata": {"model": ...},
"translations": {passage_id: english}}``) and ``per_passage_scores/<model>_per_passage_scores.json`` (a list of
records with ``passage_id``, ``normalized_drift``, ``comet_best``, ...). A source is its segments' stripped texts,
the empty ones left out, joined by single spaces, from ``root/pli/ms`` of the bilara corpus.
"""

from __future__ import annotations

import csv
import json
from dataclasses import dataclass
from pathlib import Path

from service.platform.settings import SHARED_DIR

__all__ = [
    "BILARA_ROOT",
    "DEV_DIR",
    "OUTLIER_DRIFT",
    "BenchPassage",
    "PaliBench",
    "ReferenceScores",
    "load_palibench",
]

DEV_DIR = SHARED_DIR / "palibench-dev"
BILARA_ROOT = SHARED_DIR / "corpus" / "bilara" / "root" / "pli" / "ms"
# PaliBench's own outlier rule: the drift from the human-reference centroid over the humans' spread above 2
OUTLIER_DRIFT = 2.0


@dataclass(frozen=True)
class BenchPassage:
    id: str
    sutta: str
    collection: str
    source: str


@dataclass(frozen=True)
class ReferenceScores:
    """A translation measured against the human references (reference-aided: measuring only)."""

    normalized_drift: float
    comet_best: float

    @property
    def outlier(self) -> bool:
        return self.normalized_drift > OUTLIER_DRIFT


@dataclass(frozen=True)
class PaliBench:
    """Passages in manifest order; models are the translation file stems, sorted."""

    passages: list[BenchPassage]
    models: list[str]
    model_names: dict[str, str]  # file stem -> the model named in the file's metadata (the stem when absent)
    translations: dict[str, dict[str, str]]  # model -> passage id -> translation
    scores: dict[str, dict[str, ReferenceScores]]  # model -> passage id -> reference-based scores

    @property
    def passage_ids(self) -> list[str]:
        return [p.id for p in self.passages]


def _root_files(bilara_root: Path) -> dict[str, Path]:
    return {p.name.split("_root-")[0]: p for p in bilara_root.rglob("*_root-pli-ms.json")}


def load_palibench(
    folder: str | Path = DEV_DIR, bilara_root: str | Path = BILARA_ROOT, limit: int | None = None
) -> PaliBench:
    """Read a PaliBench folder (the first ``limit`` passages of the manifest when given)."""
    folder, bilara_root = Path(folder), Path(bilara_root)
    with (folder / "passage_manifest.csv").open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    if limit:
        rows = rows[:limit]
    files = _root_files(bilara_root)
    roots: dict[str, dict[str, str]] = {}
    passages = []
    for row in rows:
        sutta = row["sutta_id"]
        if sutta not in roots:
            if sutta not in files:
                raise FileNotFoundError(f"no bilara root file for {sutta} under {bilara_root}")
            roots[sutta] = json.loads(files[sutta].read_text(encoding="utf-8"))
        segments = (roots[sutta].get(k, "").strip() for k in row["segments"].split())
        passages.append(BenchPassage(row["passage_id"], sutta, row["collection"], " ".join(s for s in segments if s)))
    models = sorted(p.stem for p in (folder / "translations").glob("*.json"))
    model_names: dict[str, str] = {}
    translations: dict[str, dict[str, str]] = {}
    scores: dict[str, dict[str, ReferenceScores]] = {}
    for m in models:
        data = json.loads((folder / "translations" / f"{m}.json").read_text(encoding="utf-8"))
        model_names[m] = str((data.get("metadata") or {}).get("model", m))
        translations[m] = {str(k): str(v) for k, v in data["translations"].items()}
        path = folder / "per_passage_scores" / f"{m}_per_passage_scores.json"
        records = json.loads(path.read_text(encoding="utf-8")) if path.exists() else []
        scores[m] = {
            r["passage_id"]: ReferenceScores(float(r["normalized_drift"]), float(r["comet_best"])) for r in records
        }
    return PaliBench(passages, models, model_names, translations, scores)
