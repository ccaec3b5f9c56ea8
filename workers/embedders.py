"""The worker's encoders: the peer encoder, opened at start, and the multilingual source encoder, opened on first
use; an encoder that does not open leaves its reason for the signals that need it."""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from service.platform.settings import Settings

__all__ = ["Embedders"]

logger = logging.getLogger("trisk.workers")


def _open_embedder(settings: Settings, backend: str) -> tuple[Any, dict[str, Any], str | None]:
    """An embedder with its cache, its signature, and the reason it is unavailable (None when it works)."""
    try:
        from service.core.embeddings import open_embedder

        emb_settings = dataclasses.replace(settings.embedding, backend=backend)
        embedder = open_embedder(emb_settings, redis_url=settings.redis.url)
        return embedder, dict(embedder.signature), None
    except Exception as exc:  # signals that need it read skipped with this reason
        logger.error("no %s embedding backend: %s", backend, exc)
        return None, {"backend": backend, "error": str(exc)}, f"embedding backend {backend} unavailable: {exc}"


class Embedders:
    """The peer encoder (opened at start) and the multilingual source encoder (opened on first use)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        peer_backend = settings.embedding.peer_backend
        self.same = peer_backend in ("same", settings.embedding.backend)
        self.peer, self.peer_signature, self.peer_error = _open_embedder(
            settings, settings.embedding.backend if self.same else peer_backend
        )
        self._source: Any = self.peer if self.same else None
        self.source_signature: dict[str, Any] | None = self.peer_signature if self.same else None
        self.source_error: str | None = None

    def source(self) -> Any:
        if self._source is None and self.source_error is None:
            self._source, self.source_signature, self.source_error = _open_embedder(
                self.settings, self.settings.embedding.backend
            )
        return self._source

    def signature(self, used_source: bool) -> dict[str, Any]:
        sig: dict[str, Any] = {"peer": self.peer_signature}
        if used_source:
            sig["source"] = self.source_signature
        return sig
