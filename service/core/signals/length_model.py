"""The corpus length model: the log letter-ratio distribution of a corpus's own translations, fitted and stored."""

from __future__ import annotations

import json
import math
import unicodedata
from collections.abc import Iterable
from pathlib import Path

import msgspec
import numpy as np

__all__ = [
    "LengthModel",
    "fit_length_model",
    "length_model_json",
    "length_model_path",
    "letter_count",
    "load_length_model",
]


class LengthModel(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Distribution of log(target letters / source letters) in a corpus's own translations, per passage."""

    source_lang: str
    target_lang: str
    mean: float
    sd: float
    median: float
    robust_sd: float  # 1.4826 * MAD
    n: int
    quantiles: dict[str, float]
    built_from: str
    unit: str = "letters"
    version: str = "1"


def letter_count(text: str) -> int:
    """Letters (Unicode L*) plus combining marks: length that ignores spacing, punctuation and digits."""
    return sum(1 for ch in text if ch.isalpha() or unicodedata.category(ch) == "Mn")


def fit_length_model(
    pairs: Iterable[tuple[str, str]], *, source_lang: str, target_lang: str, built_from: str
) -> LengthModel:
    """Fit the log length-ratio distribution from (source, translation) passage pairs; empty sides are skipped."""
    vals = []
    for src, tgt in pairs:
        ls, lt = letter_count(src), letter_count(tgt)
        if ls > 0 and lt > 0:
            vals.append(math.log(lt / ls))
    if len(vals) < 2:
        raise ValueError("need at least two non-empty passage pairs to fit a length model")
    arr = np.asarray(vals)
    med = float(np.median(arr))
    qs = {f"{q:g}": float(np.quantile(arr, q)) for q in (0.001, 0.01, 0.05, 0.25, 0.5, 0.75, 0.95, 0.99, 0.999)}
    return LengthModel(
        source_lang=source_lang,
        target_lang=target_lang,
        mean=float(arr.mean()),
        sd=float(arr.std(ddof=1)),
        median=med,
        robust_sd=float(1.4826 * np.median(np.abs(arr - med))),
        n=int(arr.shape[0]),
        quantiles=qs,
        built_from=built_from,
    )


def length_model_path(source_lang: str, target_lang: str, models_dir: str | Path) -> Path:
    return Path(models_dir) / "length" / f"{source_lang}-{target_lang}.json"


def load_length_model(source_lang: str, target_lang: str, models_dir: str | Path) -> LengthModel | None:
    """The stored length model for a language pair, or None (the length signal is then skipped with a reason)."""
    path = length_model_path(source_lang, target_lang, models_dir)
    if not path.exists():
        return None
    return msgspec.json.decode(path.read_bytes(), type=LengthModel)


def length_model_json(model: LengthModel) -> str:
    """Stable, readable JSON for the models/length/ file."""
    return json.dumps(msgspec.to_builtins(model), indent=2, sort_keys=True) + "\n"
