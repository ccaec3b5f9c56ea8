"""compute_signals: every family's signals and the hard flags for the candidates of one passage."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from service.core.signals.base import CandidateSignals, Passage, SignalFamily
from service.core.signals.copying import SourceCopy
from service.core.signals.embedding import PeerEmbedding, SourceDistance
from service.core.signals.flags import candidate_flags
from service.core.signals.length_model import LengthModel
from service.core.signals.length_ratio import LengthRatio
from service.core.signals.peer_text import PeerChrf, PeerLength
from service.core.signals.source_novelty import Novelty
from service.core.signals.translator import Translator
from service.core.types import SignalResult

__all__ = ["FAMILIES", "PEER_SIGNALS", "SIGNAL_NAMES", "compute_signals"]

# The order of the families is the order of the signals in every candidate's dict (and in SIGNAL_NAMES).
FAMILIES: tuple[SignalFamily, ...] = (
    SourceDistance(),
    PeerEmbedding(),
    PeerChrf(),
    PeerLength(),
    LengthRatio(),
    SourceCopy(),
    Translator(),
    Novelty(),
)
SIGNAL_NAMES: tuple[str, ...] = tuple(name for family in FAMILIES for name in family.names)
# Signals that need other candidates of the same passage; a model listing one of them has requires_peers = true.
PEER_SIGNALS: tuple[str, ...] = tuple(name for family in FAMILIES for name in family.peer_names)


def compute_signals(
    source: str,
    candidates: Sequence[str],
    *,
    source_lang: str = "pli",
    target_lang: str = "en",
    source_embedding: np.ndarray | None = None,
    candidate_embeddings: np.ndarray | None = None,
    candidate_models: Sequence[str] | None = None,
    length_model: LengthModel | None = None,
    novelty: SignalResult | None = None,
    source_space_embeddings: np.ndarray | None = None,
) -> list[CandidateSignals]:
    """All signals and flags for the candidates of one passage.

    ``source_space_embeddings`` are the candidates embedded with the same (multilingual) encoder as the source,
    when the peer signals use another (target-language) encoder; without them the source distance uses
    ``candidate_embeddings``.

    Embeddings are L2-normalised here (again) so cosine = dot. Every signal that cannot be computed is a
    ``SignalSkipped`` with a reason: no embeddings, one candidate only, no length model for the language pair.
    ``novelty`` is the source passage's novelty (same for every candidate), passed through so a risk model can
    use it; None means it was not looked up.
    """
    n = len(candidates)
    if candidate_models is not None and len(candidate_models) != n:
        raise ValueError(f"{n} candidates but {len(candidate_models)} model names")
    out = [
        CandidateSignals(
            signals={},
            flags=candidate_flags(source, c, source_lang=source_lang, target_lang=target_lang),
            model=None if candidate_models is None else candidate_models[i],
        )
        for i, c in enumerate(candidates)
    ]
    if n == 0:
        return out
    passage = Passage(
        source=source,
        candidates=candidates,
        source_lang=source_lang,
        target_lang=target_lang,
        source_embedding=source_embedding,
        candidate_embeddings=candidate_embeddings,
        source_space_embeddings=source_space_embeddings,
        candidate_models=candidate_models,
        length_model=length_model,
        novelty=novelty,
    )
    for family in FAMILIES:
        rows = family.compute(passage)
        for cs, row in zip(out, rows, strict=True):
            if row.keys() != set(family.names):
                raise RuntimeError(f"{type(family).__name__} returned {sorted(row)}, not {list(family.names)}")
            cs.signals.update(row)
    return out
