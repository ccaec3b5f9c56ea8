"""The word-level error detector at run time: the artifact, per-word and per-clause probabilities, findings.

The artifact (``models/detector/pli-en.json``, written by ``trisk build-detector``) holds two logistic models over
standardised features (``features.WORD_FEATURES`` and ``CLAUSE_FEATURES``), the lexicon signature it was built
with, and its build's signature. Inference is a dot product per word: no scikit-learn at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import msgspec
import numpy as np

from service.core.critical.renderings import TranslationLexicon
from service.core.detector.features import (
    CLAUSE_FEATURES,
    WORD_FEATURES,
    CandidateView,
    SourceView,
    candidate_view,
    clause_features,
    source_view,
    word_features,
)
from service.core.types import Flag, SignalResult, SignalValue, Span

__all__ = [
    "DETECTOR_FILE",
    "DETECTOR_FORMAT",
    "SIGNALS",
    "Detector",
    "DetectorFile",
    "DetectorReport",
    "Linear",
    "expand",
    "load_detector",
    "place",
]

DETECTOR_FORMAT = 1
DETECTOR_FILE = Path(__file__).resolve().parents[3] / "models" / "detector" / "pli-en.json"
# the signals a candidate gets: the highest word error probability, the highest clause missing probability
SIGNALS = ("detector_word_error", "detector_missing")
# findings: a word (a clause) at or above this probability is shown to the reviewer; on held-apart synthetic data
# (the build's signature) words at 0.5 are right about 0.75 of the time, clauses at 0.3 about 0.4 (missing clauses
# are rare, 4% of clauses, so their probabilities run low)
WORD_FINDING_P = 0.5
CLAUSE_FINDING_P = 0.3
RULE_WORD = "detector.word"
RULE_MISSING = "detector.missing"


def expand(z: np.ndarray, degree: int) -> np.ndarray:
    """The features and, for degree 2, every product of two of them (i <= j), in scikit-learn's
    PolynomialFeatures order without the constant: the interactions a linear model cannot learn by itself."""
    if degree == 1:
        return z
    i, j = np.triu_indices(z.shape[1])
    return np.hstack([z, z[:, i] * z[:, j]])


class Linear(msgspec.Struct, forbid_unknown_fields=True):
    """A logistic model over standardised features and (degree 2) their pairwise products:
    p = sigmoid(expand((x - mean) / scale) . coef + intercept)."""

    features: list[str]
    mean: list[float]
    scale: list[float]
    coef: list[float]
    intercept: float
    degree: int = 1

    def prob(self, x: np.ndarray) -> np.ndarray:
        if x.shape[0] == 0:
            return np.zeros(0)
        z = expand((x - np.asarray(self.mean)) / np.asarray(self.scale), self.degree)
        return np.asarray(1.0 / (1.0 + np.exp(-(z @ np.asarray(self.coef) + self.intercept))))


class DetectorFile(msgspec.Struct, forbid_unknown_fields=True):
    signature: dict[str, object]
    word: Linear
    clause: Linear


@dataclass(frozen=True)
class DetectorReport:
    """One candidate's reading: per token (offsets, p) the error probability, per source clause the missing one."""

    words: list[tuple[int, int, float]]
    clauses: list[tuple[int, int, float]]
    word_error: float
    missing: float
    flags: list[Flag]


class Detector:
    """Scores candidates of a source with a loaded artifact and the translation lexicon it was built with."""

    def __init__(self, data: DetectorFile, lexicon: TranslationLexicon) -> None:
        if data.word.features != list(WORD_FEATURES) or data.clause.features != list(CLAUSE_FEATURES):
            raise ValueError("detector artifact's features differ from this code's: rebuild it (trisk build-detector)")
        self.data = data
        self.lexicon = lexicon
        self.signature = data.signature
        self._views: dict[str, SourceView] = {}

    @property
    def id(self) -> str:
        return str(self.signature.get("id", ""))

    def view(self, source: str) -> SourceView:
        v = self._views.get(source)
        if v is None:
            if len(self._views) > 256:  # a worker sees a stream of passages; keep the last ones only
                self._views.clear()
            v = self._views[source] = source_view(source, self.lexicon)
        return v

    def signals(self, report: DetectorReport) -> dict[str, SignalResult]:
        """The report as the candidate's signals (the highest word and clause probabilities), with the artifact id."""
        return {
            SIGNALS[0]: SignalValue(value=report.word_error, detail={"detector": self.id}),
            SIGNALS[1]: SignalValue(value=report.missing, detail={"detector": self.id}),
        }

    def assess(self, source: str, candidates: Sequence[str]) -> list[DetectorReport]:
        src = self.view(source)
        return [self._one(source, src, text) for text in candidates]

    def _one(self, source: str, src: SourceView, text: str) -> DetectorReport:
        cand = candidate_view(text)
        wp = self.data.word.prob(word_features(src, cand, self.lexicon))
        wp = np.where(np.asarray(cand.content, dtype=bool), wp, 0.0) if len(wp) else wp
        cp = self.data.clause.prob(clause_features(src, cand))
        words = [(a, b, float(p)) for a, b, p in zip(cand.starts, cand.ends, wp, strict=True)]
        clauses = [(a, b, float(p)) for (a, b), p in zip(src.clause_spans, cp, strict=True)]
        flags: list[Flag] = []
        bad = [(a, b, p) for a, b, p in words if p >= WORD_FINDING_P]
        if bad:
            shown = ", ".join(f"\u201c{text[a:b]}\u201d ({p:.2f})" for a, b, p in sorted(bad, key=lambda w: -w[2])[:5])
            flags.append(
                Flag(
                    rule=RULE_WORD,
                    severity="minor",
                    detail=f"words the source does not seem to say (detector probability): {shown}",
                    spans=tuple(Span(a, b) for a, b, _ in bad),
                )
            )
        missing = [k for k, (_, _, p) in enumerate(clauses) if p >= CLAUSE_FINDING_P]
        if missing:
            shown = "; ".join(
                f"\u201c{source[clauses[k][0] : clauses[k][1]].strip()}\u201d ({clauses[k][2]:.2f})"
                for k in sorted(missing, key=lambda k: -clauses[k][2])[:3]
            )
            flags.append(
                Flag(
                    rule=RULE_MISSING,
                    severity="minor",
                    detail=f"source clauses the candidate does not seem to translate (detector probability): {shown}",
                    spans=tuple(Span(at, at) for at in sorted({place(src, cand, k) for k in missing})),
                )
            )
        return DetectorReport(
            words=words,
            clauses=clauses,
            word_error=float(wp.max()) if len(wp) else 0.0,
            missing=float(cp.max()) if len(cp) else 0.0,
            flags=flags,
        )


def place(src: SourceView, cand: CandidateView, k: int) -> int:
    """Where in the candidate source clause ``k`` would be: walking the clauses before it in order, each moves the
    place past the next candidate word that renders one of its stems (clauses nothing renders leave it); 0 when none
    does. The workbench marks it as missing content."""
    at, i = 0, 0
    for clause in src.clauses[:k]:
        wanted = {e for f in clause for e in src.renders.get(f, ())}
        for j in range(i, len(cand.stems)):
            if cand.stems[j] in wanted:
                at, i = cand.ends[j], j + 1
                break
    return at


def load_detector(lexicon: TranslationLexicon, path: Path | None = None) -> Detector:
    """Read the artifact and check that it was built with this lexicon and this format."""
    path = path or DETECTOR_FILE
    data = msgspec.json.decode(path.read_bytes(), type=DetectorFile)
    if data.signature.get("format_version") != DETECTOR_FORMAT:
        raise ValueError(
            f"{path}: detector format {data.signature.get('format_version')}, this trisk reads "
            f"{DETECTOR_FORMAT}; rebuild it"
        )
    if data.signature.get("lexicon") != lexicon.id:
        raise ValueError(f"{path}: built with lexicon {data.signature.get('lexicon')}, loaded {lexicon.id}; rebuild it")
    return Detector(data, lexicon)
