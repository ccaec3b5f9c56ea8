"""Vectorised 64-bit hashing of character and token n-grams over many documents at once (numpy, no Python loops)."""

from __future__ import annotations

import numpy as np

__all__ = ["char_ngram_hashes", "mix64", "token_ngram_hashes"]

_P = np.uint64(0x100000001B3)  # FNV prime: odd, spreads codepoints across the word
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser: turns a polynomial hash into well-spread bits (for buckets and signs)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64, copy=True)
        z ^= z >> np.uint64(30)
        z *= np.uint64(0xBF58476D1CE4E5B9)
        z ^= z >> np.uint64(27)
        z *= np.uint64(0x94D049BB133111EB)
        z ^= z >> np.uint64(31)
    return z


def _rolling(values: np.ndarray, starts: np.ndarray, ends: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Hashes of every length-``n`` window that lies inside one document, and the document of each window.

    ``values`` is all documents concatenated; document ``d`` spans ``starts[d]:ends[d]``.
    """
    total = values.shape[0]
    if total < n:
        return np.empty(0, np.uint64), np.empty(0, np.int64)
    with np.errstate(over="ignore"):
        h = values[: total - n + 1].astype(np.uint64) + np.uint64(1)
        for k in range(1, n):
            h = h * _P + (values[k : total - n + 1 + k].astype(np.uint64) + np.uint64(1))
        h = mix64(h + np.uint64(n) * _GOLDEN)
    lengths = ends - starts
    doc_of = np.repeat(np.arange(starts.shape[0], dtype=np.int64), lengths)[: total - n + 1]
    pos = np.arange(total - n + 1, dtype=np.int64)
    valid = pos + n <= ends[doc_of]
    return h[valid], doc_of[valid]


def _concat(arrays: list[np.ndarray], dtype: type) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    lengths = np.fromiter((a.shape[0] for a in arrays), dtype=np.int64, count=len(arrays))
    ends = np.cumsum(lengths)
    starts = ends - lengths
    values: np.ndarray = np.concatenate(arrays).astype(dtype) if arrays else np.empty(0, dtype)
    return values, starts, ends


def _all_sizes(
    values: np.ndarray, starts: np.ndarray, ends: np.ndarray, sizes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    hs, ds, ns = [], [], []
    for n in sizes:
        h, d = _rolling(values, starts, ends, n)
        hs.append(h)
        ds.append(d)
        ns.append(np.full(h.shape[0], n, dtype=np.uint8))
    return np.concatenate(hs), np.concatenate(ds), np.concatenate(ns)


def char_ngram_hashes(texts: list[str], sizes: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hash, doc, size) of every character n-gram of the given sizes in every text."""
    arrays = [np.frombuffer(t.encode("utf-32-le"), dtype=np.uint32) for t in texts]
    values, starts, ends = _concat(arrays, np.uint32)
    return _all_sizes(values, starts, ends, sizes)


def token_ngram_hashes(
    token_ids: list[np.ndarray], sizes: tuple[int, ...]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(hash, doc, size) of every token-id n-gram of the given sizes in every document."""
    values, starts, ends = _concat(token_ids, np.int64)
    return _all_sizes(values, starts, ends, sizes)
