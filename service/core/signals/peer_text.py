"""Peer agreement without embeddings: character overlap (chrF) and length of each candidate against the others."""

from __future__ import annotations

import numpy as np

from service.core.chrf import pairwise_chrf
from service.core.signals.base import NEEDS_THREE, NEEDS_TWO, FamilyRows, Passage, peer_z
from service.core.signals.length_model import letter_count
from service.core.types import SignalResult

__all__ = ["PeerChrf", "PeerLength"]

# Floor for the spread of log lengths among peers (as for distances: near-identical peers must not blow up z).
_SD_FLOOR_LOG_LENGTH = 0.05


class PeerChrf:
    """``peer_chrf_risk`` = 1 - mean over the other candidates of chrF(candidate, peer) / 100."""

    names = ("peer_chrf_risk",)
    peer_names = names

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        rows = FamilyRows(passage.n)
        n = passage.n
        if n < 2:
            rows.skip("peer_chrf_risk", NEEDS_TWO)
            return rows.rows
        scores = pairwise_chrf(passage.candidates)
        rows.put(
            "peer_chrf_risk", [1.0 - sum(scores[i, j] for j in range(n) if j != i) / (n - 1) / 100.0 for i in range(n)]
        )
        return rows.rows


class PeerLength:
    """``peer_length_z`` (|z| of the candidate's log letter count against the others'; detail: signed z) and
    ``peer_length_short_z`` (only the too-short side)."""

    names = ("peer_length_z", "peer_length_short_z")
    peer_names = names

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        rows = FamilyRows(passage.n)
        n = passage.n
        if n < 3:
            for name in self.names:
                rows.skip(name, NEEDS_TWO if n < 2 else NEEDS_THREE)
            return rows.rows
        loglen = np.log(np.maximum([letter_count(c) for c in passage.candidates], 1).astype(np.float64))
        z = np.array([peer_z(loglen, i, _SD_FLOOR_LOG_LENGTH) for i in range(n)])
        rows.put("peer_length_z", np.abs(z), [{"signed_z": float(v)} for v in z])
        rows.put("peer_length_short_z", np.maximum(0.0, -z))
        return rows.rows
