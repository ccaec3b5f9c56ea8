"""A content-hash cache around any embedder: an in-process LRU, then optionally Redis, then the backend.

Vectors are cached per tenant (``for_tenant``; the hash covers the tenant): a text another tenant submitted is
embedded again, so how fast a tenant's assessment finishes cannot tell it that anyone else sent the same text.
"""

from __future__ import annotations

import copy
import hashlib
import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, TypeVar, cast

import numpy as np
import redis
import redis.asyncio

from service.core.embeddings._base import Embedder, Kind, check_inputs
from service.platform.errors import NotReady

__all__ = ["CacheStats", "CachedEmbedder", "content_hash", "for_tenant"]

log = logging.getLogger(__name__)

# redis-py raises its own errors for server trouble and OSError subclasses for sockets
_REDIS_ERRORS = (redis.RedisError, OSError)
_TAG = 32  # bytes of the sha256 that head a slot's value


def content_hash(backend: str, model_id: str, kind: str, text: str, scope: str = "") -> str:
    """sha256 over backend, model, kind, text and whose cache it is (``scope``, a tenant), unit-separated so no two
    tuples collide."""
    parts = (backend, model_id, kind, text) if not scope else (backend, model_id, kind, text, scope)
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()


E = TypeVar("E")


def for_tenant(embedder: E, tenant: str) -> E:
    """``embedder`` caching under ``tenant``'s keys when it is a CachedEmbedder (any other embedder as it is)."""
    return embedder.for_tenant(tenant) if isinstance(embedder, CachedEmbedder) else embedder  # type: ignore[return-value]


@dataclass
class CacheStats:
    hits_memory: int = 0
    hits_redis: int = 0
    misses: int = 0
    redis_errors: int = 0


class CachedEmbedder:
    """Embeds each distinct (backend, model, kind, text) once.

    Redis keys are ``{prefix}:{model_id}:{kind}:{sha256}`` holding the raw float32 row (little-endian), with a
    TTL; with ``slots`` > 0 the Redis layer is bounded instead: a vector goes to one of ``slots`` keys
    (``{prefix}:{model_id}:slot:{n}``, n from its hash), stored after the 32 bytes of its hash, so a later vector of
    the same slot replaces it and a read is a hit only when the hash stored matches (the hash covers kind and tenant:
    another tenant's vector in the slot is a miss). Its memory is then at most ``slots`` vectors whatever the
    traffic, where keys per text grow with the distinct texts of a TTL. Redis is an accelerator, not a dependency:
    when it fails the call goes on to the backend, the failure is logged and counted in ``stats.redis_errors``. Pass
    a sync client for ``embed`` and/or an asyncio client for ``aembed``.
    """

    def __init__(
        self,
        inner: Embedder,
        *,
        max_items: int = 10_000,
        redis_client: redis.Redis | None = None,
        aredis_client: redis.asyncio.Redis | None = None,
        ttl_seconds: int = 30 * 24 * 3600,
        prefix: str = "trisk:emb",
        slots: int = 0,
    ) -> None:
        self.inner = inner
        self.max_items = max(0, max_items)
        self._redis = redis_client
        self._aredis = aredis_client
        self.ttl_seconds = ttl_seconds
        self.prefix = prefix
        self.slots = max(0, slots)
        self.stats = CacheStats()
        self.scope = ""  # the tenant whose vectors these are ("" = unscoped: benchmarks, the CLI)
        self._lru: OrderedDict[tuple[str, str], np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    def for_tenant(self, tenant: str) -> CachedEmbedder:
        """A view that shares the backend, the LRU, the Redis clients and the counters, under ``tenant``'s keys."""
        view = copy.copy(self)
        view.scope = tenant
        return view

    # the Embedder surface: the cache never changes a vector, so it reports the backend's identity
    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dim(self) -> int:
        return self.inner.dim

    @property
    def signature(self) -> dict[str, object]:
        return self.inner.signature

    def _known_dim(self) -> int | None:
        try:
            return self.inner.dim
        except NotReady:  # a remote backend learns its dimension on the first call
            return None

    def redis_key(self, kind: str, sha: str) -> str:
        if self.slots:
            return f"{self.prefix}:{self.inner.model_id}:slot:{int(sha[:15], 16) % self.slots}"
        return f"{self.prefix}:{self.inner.model_id}:{kind}:{sha}"

    # -- in-process layer -----------------------------------------------------------------------------------

    def _lru_get(self, kind: str, shas: list[str]) -> dict[str, np.ndarray]:
        found: dict[str, np.ndarray] = {}
        with self._lock:
            for sha in shas:
                vector = self._lru.get((kind, sha))
                if vector is not None:
                    self._lru.move_to_end((kind, sha))
                    found[sha] = vector
        return found

    def _lru_put(self, kind: str, items: dict[str, np.ndarray]) -> None:
        if not self.max_items:
            return
        with self._lock:
            for sha, vector in items.items():
                self._lru[(kind, sha)] = vector
                self._lru.move_to_end((kind, sha))
            while len(self._lru) > self.max_items:
                self._lru.popitem(last=False)

    def clear_memory(self) -> None:
        with self._lock:
            self._lru.clear()

    # -- shared bookkeeping ---------------------------------------------------------------------------------

    def _plan(self, texts: list[str], kind: Kind) -> tuple[list[str], dict[str, str], dict[str, np.ndarray]]:
        shas = [content_hash(self.inner.name, self.inner.model_id, kind, text, self.scope) for text in texts]
        text_of = dict(zip(shas, texts, strict=True))
        found = self._lru_get(kind, list(text_of))
        self.stats.hits_memory += len(found)
        return shas, text_of, found

    def _decode(self, raw: list[Any], shas: list[str]) -> dict[str, np.ndarray]:
        dim = self._known_dim()
        found: dict[str, np.ndarray] = {}
        for sha, value in zip(shas, raw, strict=True):
            if not isinstance(value, bytes):
                continue
            if self.slots:
                if value[:_TAG] != bytes.fromhex(sha):
                    continue  # the slot holds another text's vector (or another tenant's): a miss
                value = value[_TAG:]
            if not value or len(value) % 4:
                continue
            vector = np.frombuffer(value, dtype="<f4").astype(np.float32)
            if dim is None or vector.shape[0] == dim:
                found[sha] = vector
        return found

    def _redis_failed(self, exc: BaseException) -> None:
        self.stats.redis_errors += 1
        log.warning("embedding cache: redis unavailable, going on without it: %s", exc)

    def _finish(
        self, shas: list[str], found: dict[str, np.ndarray], missing: list[str], fresh: np.ndarray, kind: Kind
    ) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        computed = {sha: np.array(fresh[i], dtype=np.float32) for i, sha in enumerate(missing)}
        self.stats.misses += len(computed)
        self._lru_put(kind, computed)
        found.update(computed)
        return np.stack([found[sha] for sha in shas]).astype(np.float32, copy=False), computed

    def _empty(self) -> np.ndarray:
        return np.empty((0, self._known_dim() or 0), dtype=np.float32)

    # -- blocking -------------------------------------------------------------------------------------------

    def embed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray:
        check_inputs(texts, kind)
        if not texts:
            return self._empty()
        shas, text_of, found = self._plan(texts, kind)
        wanted = [sha for sha in text_of if sha not in found]
        if wanted and self._redis is not None:
            try:
                raw = cast("list[Any]", self._redis.mget([self.redis_key(kind, s) for s in wanted]))
                from_redis = self._decode(raw, wanted)
            except _REDIS_ERRORS as exc:
                self._redis_failed(exc)
            else:
                self.stats.hits_redis += len(from_redis)
                self._lru_put(kind, from_redis)
                found.update(from_redis)
        missing = [sha for sha in text_of if sha not in found]
        fresh = self.inner.embed([text_of[sha] for sha in missing], kind) if missing else None
        if fresh is None:
            return np.stack([found[sha] for sha in shas]).astype(np.float32, copy=False)
        matrix, computed = self._finish(shas, found, missing, fresh, kind)
        if self._redis is not None:
            try:
                with self._redis.pipeline(transaction=False) as pipe:
                    for sha, vector in computed.items():
                        self._store(pipe, kind, sha, vector)
                    pipe.execute()
            except _REDIS_ERRORS as exc:
                self._redis_failed(exc)
        return matrix

    def _store(self, pipe: Any, kind: str, sha: str, vector: np.ndarray) -> None:
        value = vector.astype("<f4").tobytes()
        if self.slots:
            value = bytes.fromhex(sha) + value
        if self.ttl_seconds > 0:
            pipe.set(self.redis_key(kind, sha), value, ex=self.ttl_seconds)
        else:
            pipe.set(self.redis_key(kind, sha), value)

    # -- async ----------------------------------------------------------------------------------------------

    async def aembed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray:
        check_inputs(texts, kind)
        if not texts:
            return self._empty()
        shas, text_of, found = self._plan(texts, kind)
        wanted = [sha for sha in text_of if sha not in found]
        if wanted and self._aredis is not None:
            try:
                araw: list[Any] = await self._aredis.mget([self.redis_key(kind, s) for s in wanted])
            except _REDIS_ERRORS as exc:
                self._redis_failed(exc)
            else:
                from_redis = self._decode(araw, wanted)
                self.stats.hits_redis += len(from_redis)
                self._lru_put(kind, from_redis)
                found.update(from_redis)
        missing = [sha for sha in text_of if sha not in found]
        fresh = await self.inner.aembed([text_of[sha] for sha in missing], kind) if missing else None
        if fresh is None:
            return np.stack([found[sha] for sha in shas]).astype(np.float32, copy=False)
        matrix, computed = self._finish(shas, found, missing, fresh, kind)
        if self._aredis is not None:
            try:
                async with self._aredis.pipeline(transaction=False) as pipe:
                    for sha, vector in computed.items():
                        self._store(pipe, kind, sha, vector)
                    await pipe.execute()
            except _REDIS_ERRORS as exc:
                self._redis_failed(exc)
        return matrix

    def __repr__(self) -> str:
        return f"CachedEmbedder({self.inner!r}, redis={self._redis is not None or self._aredis is not None})"
