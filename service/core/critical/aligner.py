"""IBM-model-1 word alignment by EM in numpy with fast_align's diagonal prior: expected link counts of word pairs.

Each sentence pair contributes every (source word or NULL, target word) pair; the parameters live on the distinct
pairs only (a sparse table), so memory is a few arrays the size of the pair list. Both directions are trained and
their posterior link counts averaged, which keeps links both models believe in (as symmetrised alignments do).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["AlignParams", "LinkCounts", "align_counts", "posterior_links"]

NULL = 0  # id 0 of each vocabulary is the empty word a target word may align to


@dataclass(frozen=True)
class AlignParams:
    """EM settings: iterations, the weight of NULL, and the diagonal prior's tension (0 = plain IBM model 1)."""

    iterations: int = 6
    null_prob: float = 0.08
    diagonal_tension: float = 4.0


@dataclass(frozen=True)
class LinkCounts:
    """Expected links per distinct (source id, target id) pair, ids into the caller's vocabularies (0 = NULL)."""

    src: np.ndarray
    tgt: np.ndarray
    count: np.ndarray


class _Pairs:
    """Every (source position or NULL, target position) pair of a corpus, with the prior of each."""

    def __init__(self, src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], params: AlignParams) -> None:
        f_ids, e_ids, e_pos, prior = [], [], [], []
        offset = 0
        for f, e in zip(src, tgt, strict=True):
            m, n = f.shape[0], e.shape[0]
            if not n:
                continue
            ff = np.concatenate(([NULL], f)).astype(np.int32)
            # (n, m + 1) grid: row j = target position, column i = NULL then the source positions
            f_ids.append(np.broadcast_to(ff, (n, m + 1)).ravel())
            e_ids.append(np.repeat(e.astype(np.int32), m + 1))
            e_pos.append(np.repeat(np.arange(offset, offset + n, dtype=np.int32), m + 1))
            if m:
                rel = np.abs((np.arange(n)[:, None] + 0.5) / n - (np.arange(m)[None, :] + 0.5) / m)
                w = np.exp(-params.diagonal_tension * rel)
                w = (1.0 - params.null_prob) * w / w.sum(axis=1, keepdims=True)
                grid = np.concatenate((np.full((n, 1), params.null_prob), w), axis=1)
            else:
                grid = np.ones((n, 1))
            prior.append(grid.ravel())
            offset += n
        self.f = np.concatenate(f_ids)
        self.e = np.concatenate(e_ids)
        self.pos = np.concatenate(e_pos)
        self.prior = np.concatenate(prior).astype(np.float32)
        self.n_targets = offset


def _em(pairs: _Pairs, key: np.ndarray, n_keys: int, iterations: int) -> np.ndarray:
    """Expected link counts per distinct pair after ``iterations`` EM steps of t(target | source)."""
    f_of_key = np.zeros(n_keys, dtype=np.int64)
    f_of_key[key] = pairs.f
    t = np.ones(n_keys, dtype=np.float64)  # uniform start: every pair equally likely
    counts: np.ndarray = np.zeros(n_keys)
    for _ in range(iterations):
        p = t[key] * pairs.prior
        z = np.bincount(pairs.pos, weights=p, minlength=pairs.n_targets)
        post = p / z[pairs.pos]
        counts = np.bincount(key, weights=post, minlength=n_keys)
        totals = np.bincount(f_of_key, weights=counts)
        t = counts / np.maximum(totals[f_of_key], 1e-300)
    return counts


def posterior_links(
    src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], n_src: int, n_tgt: int, params: AlignParams
) -> LinkCounts:
    """Expected link counts of the target words given the source words (one direction)."""
    pairs = _Pairs(src, tgt, params)
    uniq, key = np.unique(pairs.f.astype(np.int64) * n_tgt + pairs.e, return_inverse=True)
    counts = _em(pairs, key.ravel(), uniq.shape[0], params.iterations)
    return LinkCounts(src=(uniq // n_tgt).astype(np.int32), tgt=(uniq % n_tgt).astype(np.int32), count=counts)


def align_counts(
    src: Sequence[np.ndarray], tgt: Sequence[np.ndarray], n_src: int, n_tgt: int, params: AlignParams
) -> LinkCounts:
    """Both directions' expected link counts, averaged over the (source, target) pairs either direction links."""
    fwd = posterior_links(src, tgt, n_src, n_tgt, params)
    rev = posterior_links(tgt, src, n_tgt, n_src, params)
    keys = np.concatenate((fwd.src.astype(np.int64) * n_tgt + fwd.tgt, rev.tgt.astype(np.int64) * n_tgt + rev.src))
    uniq, inv = np.unique(keys, return_inverse=True)
    counts = np.bincount(inv.ravel(), weights=np.concatenate((fwd.count, rev.count)), minlength=uniq.shape[0]) / 2
    return LinkCounts(src=(uniq // n_tgt).astype(np.int32), tgt=(uniq % n_tgt).astype(np.int32), count=counts)
