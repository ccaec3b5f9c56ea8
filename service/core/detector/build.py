"""Build the word-level error detector (models/detector/pli-en.json) from synthetic errors in the aligned corpus.

    .venv/bin/trisk build-detector [--exclude-suttas FILE] [--seed N] [--out models/detector/pli-en.json]

The training pairs come from the texts the translation lexicon never saw (its held-out twentieth,
``build_lexicon.held_out``), so the lexicon reads them as it reads a new candidate; the PaliBench dev suttas and the
texts listed in ``--exclude-suttas`` (one id a line, ``#`` comments) are left out. A fifth of those texts (by a hash
of the id) is held apart: the token-level precision and recall the build prints and records are measured there.
"""

from __future__ import annotations

import argparse
import hashlib
import random
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

import msgspec
import numpy as np

from service.core.artifacts import signature_id
from service.core.critical.build_glossary import Segment, aligned_segments, dev_texts
from service.core.critical.build_lexicon import held_out
from service.core.critical.renderings import TranslationLexicon, load_translation_lexicon
from service.core.detector.features import (
    CLAUSE_FEATURES,
    WORD_FEATURES,
    SourceView,
    candidate_view,
    clause_features,
    source_view,
    word_features,
)
from service.core.detector.model import DETECTOR_FILE, DETECTOR_FORMAT, DetectorFile, Linear, expand
from service.core.detector.synth import SYNTH_VERSION, Chunk, Pair, chunks, synthesize

__all__ = ["build", "evaluate", "featurize", "held_apart", "main", "read_exclusions", "training_chunks"]

DEFAULT_SEED = 20261205


def held_apart(text_id: str) -> bool:
    """Whether a text's synthetic pairs are kept for the detector's own evaluation (a fifth, by hash)."""
    return hashlib.sha256(f"detector:{text_id}".encode()).digest()[0] % 5 == 0


def read_exclusions(path: Path | None) -> set[str]:
    """Sutta ids of a file (one a line; blank lines and ``#`` comments skipped)."""
    if path is None:
        return set()
    return {ln.split("#", 1)[0].strip() for ln in path.read_text().splitlines()} - {""}


def _overlaps(a: int, b: int, spans: Sequence[tuple[int, int]]) -> bool:
    return any(a < y and b > x for x, y in spans)


def featurize(
    pairs: Sequence[Pair], lexicon: TranslationLexicon
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(word rows, word tags, word pair index, clause rows, clause tags, clause pair index) of content words and
    source clauses."""
    xw, yw, gw, xc, yc, gc = [], [], [], [], [], []
    views: dict[str, SourceView] = {}
    for k, p in enumerate(pairs):
        src = views.get(p.source)
        if src is None:
            src = views[p.source] = source_view(p.source, lexicon)
        cand = candidate_view(p.target)
        rows = word_features(src, cand, lexicon)
        for i, (a, b) in enumerate(zip(cand.starts, cand.ends, strict=True)):
            if cand.content[i]:
                xw.append(rows[i])
                yw.append(_overlaps(a, b, p.bad_words))
                gw.append(k)
        crow = clause_features(src, cand)
        for i, (a, b) in enumerate(src.clause_spans):
            xc.append(crow[i])
            yc.append(_overlaps(a, b, p.missing))
            gc.append(k)
    return (
        np.asarray(xw).reshape(-1, len(WORD_FEATURES)),
        np.asarray(yw, dtype=bool),
        np.asarray(gw, dtype=np.int64),
        np.asarray(xc).reshape(-1, len(CLAUSE_FEATURES)),
        np.asarray(yc, dtype=bool),
        np.asarray(gc, dtype=np.int64),
    )


def _fit(x: np.ndarray, y: np.ndarray, names: Sequence[str], degree: int = 2) -> Linear:
    """Logistic regression (L2, C=0.3) on the standardised features and their pairwise products."""
    from sklearn.linear_model import LogisticRegression

    mean = x.mean(axis=0)
    scale = np.where(x.std(axis=0) > 1e-9, x.std(axis=0), 1.0)
    lr = LogisticRegression(C=0.3, max_iter=3000)
    lr.fit(expand((x - mean) / scale, degree), y)
    return Linear(
        degree=degree,
        features=list(names),
        mean=[round(float(v), 6) for v in mean],
        scale=[round(float(v), 6) for v in scale],
        coef=[round(float(v), 6) for v in lr.coef_[0]],
        intercept=round(float(lr.intercept_[0]), 6),
    )


def _pr(p: np.ndarray, y: np.ndarray, threshold: float) -> dict[str, float]:
    hit = p >= threshold
    tp = float(np.sum(hit & y))
    return {
        "threshold": threshold,
        "precision": round(tp / max(1.0, float(hit.sum())), 3),
        "recall": round(tp / max(1.0, float(y.sum())), 3),
    }


def evaluate(model: DetectorFile, pairs: Sequence[Pair], lexicon: TranslationLexicon) -> dict[str, object]:
    """Token-level and clause-level precision/recall, per error type recall of the passage's own errors, and the
    passage AUC of the two signals, on ``pairs``."""
    from service.core.metrics import auc

    xw, yw, gw, xc, yc, gc = featurize(pairs, lexicon)
    pw, pc = model.word.prob(xw), model.clause.prob(xc)
    out: dict[str, object] = {
        "pairs": len(pairs),
        "word_tags": int(yw.sum()),
        "words": len(yw),
        "word": [_pr(pw, yw, t) for t in (0.3, 0.5, 0.7)],
        "word_auc": round(auc(list(pw), list(yw)), 3),
        "clause_tags": int(yc.sum()),
        "clauses": len(yc),
        "clause": [_pr(pc, yc, t) for t in (0.3, 0.5, 0.7)],
        "clause_auc": round(auc(list(pc), list(yc)), 3),
    }
    n = len(pairs)
    word_max = np.zeros(n)
    np.maximum.at(word_max, gw, pw)
    miss_max = np.zeros(n)
    np.maximum.at(miss_max, gc, pc)
    clean = [k for k, p in enumerate(pairs) if not p.label]
    per_type: dict[str, dict[str, float]] = {}
    for etype in sorted({p.error_type for p in pairs if p.label}):
        pos = [k for k, p in enumerate(pairs) if p.error_type == etype]
        labels = [True] * len(pos) + [False] * len(clean)
        per_type[etype] = {
            "n": len(pos),
            "auc_word": round(auc([*word_max[pos], *word_max[clean]], labels), 3),
            "auc_missing": round(auc([*miss_max[pos], *miss_max[clean]], labels), 3),
        }
    out["passage_auc"] = per_type
    return out


def training_chunks(segments: Iterable[Segment], exclude: set[str], seed: int) -> tuple[list[Chunk], list[Chunk]]:
    """(training, held-apart) chunks of the segments of texts the lexicon held out, ``exclude`` left out."""
    segs = [s for s in segments if held_out(s.text_id) and s.text_id not in exclude]
    cs = chunks(segs, random.Random(seed))
    return [c for c in cs if not held_apart(c.text_id)], [c for c in cs if held_apart(c.text_id)]


def build(
    lexicon: TranslationLexicon,
    exclude: set[str],
    seed: int = DEFAULT_SEED,
    draws: int = 3,
    segments: Iterable[Segment] | None = None,
) -> tuple[DetectorFile, dict[str, object]]:
    """The detector fitted on synthetic errors in the corpus's segments (``segments``, by default every aligned
    bilara segment), the PaliBench dev suttas and ``exclude`` left out; and its held-apart figures."""
    t0 = time.perf_counter()
    skip = exclude | dev_texts()
    train_c, test_c = training_chunks(aligned_segments(skip) if segments is None else segments, skip, seed)
    if not train_c or not test_c:
        raise SystemExit("no aligned segments: is the bilara corpus at TRISK_SHARED_DIR/corpus/bilara?")
    train = synthesize(train_c, lexicon, seed, draws)
    test = synthesize(test_c, lexicon, seed + 1, draws)
    t_synth = time.perf_counter()
    xw, yw, _, xc, yc, _ = featurize(train, lexicon)
    t_feat = time.perf_counter()
    word, clause = _fit(xw, yw, WORD_FEATURES), _fit(xc, yc, CLAUSE_FEATURES)
    import sklearn

    signature: dict[str, object] = {
        "format_version": DETECTOR_FORMAT,
        "name": "pli-en-detector",
        "synth_version": SYNTH_VERSION,
        "seed": seed,
        "draws": draws,
        "lexicon": lexicon.id,
        "excluded": {
            "texts": len(skip),
            "sha256": hashlib.sha256("\n".join(sorted(skip)).encode()).hexdigest(),
            "what": "PaliBench dev suttas and --exclude-suttas; only the lexicon's held-out texts are used",
        },
        "chunks": {"train": len(train_c), "held_apart": len(test_c)},
        "pairs": {"train": len(train), "held_apart": len(test)},
        "libraries": {"numpy": np.__version__, "scikit-learn": sklearn.__version__},
    }
    model = DetectorFile(signature=signature, word=word, clause=clause)
    metrics = evaluate(model, test, lexicon)
    signature["held_apart"] = metrics
    signature["build_seconds"] = {
        "synthesize": round(t_synth - t0, 1),
        "features": round(t_feat - t_synth, 1),
        "total": round(time.perf_counter() - t0, 1),
    }
    signature["id"] = signature_id({k: v for k, v in signature.items() if k not in ("build_seconds",)})
    return model, metrics


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--exclude-suttas", type=Path, help="sutta ids to leave out (one a line), beside PaliBench dev")
    ap.add_argument("--seed", type=int, default=DEFAULT_SEED)
    ap.add_argument("--draws", type=int, default=3, help="corrupted copies per chunk (default %(default)s)")
    ap.add_argument("--lexicon", type=Path, help="the translation lexicon (default: the configured one)")
    ap.add_argument("--out", type=Path, default=DETECTOR_FILE)
    args = ap.parse_args(argv)
    lexicon = load_translation_lexicon(args.lexicon)
    model, metrics = build(lexicon, read_exclusions(args.exclude_suttas), args.seed, args.draws)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(msgspec.json.format(msgspec.json.encode(model), indent=1) + b"\n")
    sig = model.signature
    print(
        f"wrote {args.out}: {sig['pairs']} pairs, {sig['build_seconds']} s; signature {sig['id']}\n"
        f"held-apart synthetic data: {msgspec.json.encode(metrics).decode()}",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
