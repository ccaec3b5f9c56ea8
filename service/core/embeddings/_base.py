"""The embedder interface shared by every backend, plus input checks and row normalisation."""

from __future__ import annotations

import asyncio
import threading
from abc import ABC, abstractmethod
from typing import Literal, Protocol, runtime_checkable

import numpy as np

from service.platform.errors import InputError

__all__ = ["KINDS", "BaseEmbedder", "Embedder", "Kind", "check_inputs", "l2_normalize"]

Kind = Literal["query", "passage"]
KINDS: tuple[str, ...] = ("query", "passage")


@runtime_checkable
class Embedder(Protocol):
    """Texts in, float32 L2-normalised rows out (shape ``(len(texts), dim)``)."""

    @property
    def name(self) -> str: ...

    @property
    def model_id(self) -> str: ...

    @property
    def dim(self) -> int: ...

    @property
    def signature(self) -> dict[str, object]: ...

    def embed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray: ...

    async def aembed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray: ...


def check_inputs(texts: list[str], kind: str) -> None:
    """Reject what no backend can embed (a bare string would be embedded character by character)."""
    if isinstance(texts, str) or not isinstance(texts, list | tuple):
        raise InputError("texts must be a list of strings")
    if kind not in KINDS:
        raise InputError(f"kind must be one of {KINDS}, not {kind!r}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise InputError(f"texts[{i}] is {type(text).__name__}, not str")


def l2_normalize(matrix: np.ndarray) -> np.ndarray:
    """float32 rows of unit length (an all-zero row stays zero instead of becoming NaN)."""
    out = np.ascontiguousarray(matrix, dtype=np.float32)
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    np.maximum(norms, 1e-12, out=norms)
    return out / norms


class BaseEmbedder(ABC):
    """A local (CPU) backend: ``embed`` does the work, ``aembed`` runs it in a thread; calls are serialised."""

    name: str = ""

    def __init__(self) -> None:
        # one batch at a time: each backend already uses every core it was given, so parallel calls only thrash
        self._lock = threading.Lock()

    @property
    @abstractmethod
    def model_id(self) -> str: ...

    @property
    @abstractmethod
    def dim(self) -> int: ...

    @property
    @abstractmethod
    def signature(self) -> dict[str, object]: ...

    @abstractmethod
    def _embed(self, texts: list[str], kind: Kind) -> np.ndarray:
        """Embed a non-empty list of distinct texts."""

    def embed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray:
        check_inputs(texts, kind)
        if not texts:
            return np.empty((0, self.dim), dtype=np.float32)
        # duplicates are common (identical candidates, repeated refrains): embed each distinct text once
        unique = list(dict.fromkeys(texts))
        with self._lock:
            vectors = l2_normalize(self._embed(unique, kind))
        if len(unique) == len(texts):
            return vectors
        row = {text: i for i, text in enumerate(unique)}
        return vectors[[row[text] for text in texts]]

    async def aembed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray:
        return await asyncio.to_thread(self.embed, texts, kind)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model_id={self.model_id!r})"
