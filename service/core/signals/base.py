"""The signal-family interface: a passage's inputs, one family's per-candidate results, the output record."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Protocol

import msgspec
import numpy as np

from service.core.signals.length_model import LengthModel
from service.core.types import Flag, SignalResult, SignalSkipped, SignalValue

__all__ = [
    "NEEDS_THREE",
    "NEEDS_TWO",
    "CandidateSignals",
    "FamilyRows",
    "Passage",
    "SignalFamily",
    "peer_z",
    "unit_rows",
]

# Skip reasons shared by every family whose signals compare a candidate with the other candidates.
NEEDS_TWO = "needs at least two candidates of the same passage"
NEEDS_THREE = "needs at least three candidates (a spread of the other candidates)"


class CandidateSignals(msgspec.Struct, forbid_unknown_fields=True):
    """Signals (name -> value or skip reason) and hard flags of one candidate."""

    signals: dict[str, SignalResult]
    flags: list[Flag]
    model: str | None = None


def unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows (or one vector) scaled to length 1; zero rows stay zero."""
    norms = np.linalg.norm(x, axis=-1, keepdims=True)
    return x / np.where(norms == 0.0, 1.0, norms)


@dataclass(frozen=True, eq=False)
class Passage:
    """What the families see of one passage (at least one candidate); shared derived arrays are computed once.

    ``source_space_embeddings`` are the candidates embedded with the source's (multilingual) encoder, when the peer
    signals use another (target-language) encoder in ``candidate_embeddings``.
    """

    source: str
    candidates: Sequence[str]
    source_lang: str = "pli"
    target_lang: str = "en"
    source_embedding: np.ndarray | None = None
    candidate_embeddings: np.ndarray | None = None
    source_space_embeddings: np.ndarray | None = None
    candidate_models: Sequence[str] | None = None
    length_model: LengthModel | None = None
    novelty: SignalResult | None = None

    @property
    def n(self) -> int:
        return len(self.candidates)

    @cached_property
    def candidate_unit(self) -> np.ndarray | None:
        """The candidate embeddings as unit rows (n, dim), so cosine = dot; None without embeddings."""
        if self.candidate_embeddings is None:
            return None
        return unit_rows(np.asarray(self.candidate_embeddings, dtype=np.float64).reshape(self.n, -1))

    @cached_property
    def source_distances(self) -> np.ndarray | None:
        """1 - cosine(candidate, source) per candidate in the source's embedding space (the candidate embeddings
        when no separate source-space ones are given); None without a source embedding or candidates in its space."""
        space = self.candidate_unit
        if self.source_space_embeddings is not None:
            space = unit_rows(np.asarray(self.source_space_embeddings, dtype=np.float64).reshape(self.n, -1))
        if space is None or self.source_embedding is None:
            return None
        src = unit_rows(np.asarray(self.source_embedding, dtype=np.float64).ravel())
        return 1.0 - space @ src


class FamilyRows:
    """Per-candidate results of one family, filled one signal at a time."""

    def __init__(self, n: int) -> None:
        self.rows: list[dict[str, SignalResult]] = [{} for _ in range(n)]

    def put(
        self, name: str, values: Sequence[float] | np.ndarray, detail: Sequence[dict[str, object]] | None = None
    ) -> None:
        for i, v in enumerate(values):
            self.rows[i][name] = SignalValue(value=float(v), detail={} if detail is None else detail[i])

    def skip(self, name: str, reason: str) -> None:
        for row in self.rows:
            row[name] = SignalSkipped(reason=reason)


class SignalFamily(Protocol):
    """Signals computed together from the same inputs. ``compute`` returns, per candidate, a result (value or skip
    with its reason) for every name in ``names``; ``peer_names`` are those that need other candidates."""

    @property
    def names(self) -> tuple[str, ...]: ...

    @property
    def peer_names(self) -> tuple[str, ...]: ...

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]: ...


def peer_z(values: np.ndarray, i: int, floor: float) -> float:
    """z of values[i] against the other values (mean, sample sd floored)."""
    others = np.delete(values, i)
    sd = float(others.std(ddof=1)) if others.shape[0] >= 2 else 0.0
    return float((values[i] - others.mean()) / max(sd, floor))
