"""Embedding signals: distance of each candidate to the source, and agreement of the candidates with each other."""

from __future__ import annotations

import numpy as np

from service.core.signals.base import NEEDS_THREE, NEEDS_TWO, FamilyRows, Passage, peer_z, unit_rows
from service.core.types import SignalResult

__all__ = ["PeerEmbedding", "SourceDistance"]

# Floor for a spread of cosine distances among peers: with near-identical peers a tiny sd would turn noise into huge
# z-scores.
_SD_FLOOR_DISTANCE = 0.005
_KNN_K = 3


class SourceDistance:
    """``source_distance`` (1 - cosine to the source, in the source's encoder space) and ``source_distance_peer_z``
    (that distance against the other candidates')."""

    names = ("source_distance", "source_distance_peer_z")
    peer_names = ("source_distance_peer_z",)

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        rows = FamilyRows(passage.n)
        dist = passage.source_distances
        if dist is None:
            rows.skip("source_distance", "not requested (check source_distance) or no source embedding")
        else:
            rows.put("source_distance", dist)
        n = passage.n
        if n < 2:
            rows.skip("source_distance_peer_z", NEEDS_TWO)
        elif passage.candidate_unit is None:
            # counted among the peer-embedding signals, so skipped without peer embeddings even when the
            # source-space embeddings alone would give it
            rows.skip("source_distance_peer_z", "no candidate embeddings")
        elif dist is None:
            rows.skip("source_distance_peer_z", "no source embedding")
        elif n >= 3:
            rows.put("source_distance_peer_z", [peer_z(dist, i, _SD_FLOOR_DISTANCE) for i in range(n)])
        else:
            rows.skip("source_distance_peer_z", NEEDS_THREE)
        return rows.rows


class PeerEmbedding:
    """How far each candidate's embedding sits from the other candidates': from their centroid, on average, from its
    ``_KNN_K`` nearest; and the centroid distance as a z against the others' centroid distances."""

    names = ("peer_centroid_distance", "peer_centroid_z", "peer_mean_distance", "peer_knn_distance")
    peer_names = names

    def compute(self, passage: Passage) -> list[dict[str, SignalResult]]:
        rows = FamilyRows(passage.n)
        n, emb = passage.n, passage.candidate_unit
        if n < 2:
            for name in self.names:
                rows.skip(name, NEEDS_TWO)
            return rows.rows
        if emb is None:
            for name in self.names:
                rows.skip(name, "no candidate embeddings")
            return rows.rows
        dist = 1.0 - emb @ emb.T
        total = emb.sum(axis=0)
        centroid_d = np.empty(n)
        for i in range(n):
            centroid_d[i] = 1.0 - float(emb[i] @ unit_rows(total - emb[i]))
        rows.put("peer_centroid_distance", centroid_d)
        off = ~np.eye(n, dtype=bool)
        peer_d = [dist[i][off[i]] for i in range(n)]
        rows.put("peer_mean_distance", [float(d.mean()) for d in peer_d])
        k = min(_KNN_K, n - 1)
        rows.put("peer_knn_distance", [float(np.sort(d)[:k].mean()) for d in peer_d])
        if n >= 3:
            rows.put("peer_centroid_z", [peer_z(centroid_d, i, _SD_FLOOR_DISTANCE) for i in range(n)])
        else:
            rows.skip("peer_centroid_z", NEEDS_THREE)
        return rows.rows
