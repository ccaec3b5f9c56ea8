"""Resources opened once per process in the lifespan and kept on ``app.state.resources``."""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from redis.asyncio import Redis

from service.app.auth import KeyCache
from service.core.novelty import NoveltyIndex
from service.core.text import get_normaliser
from service.platform.errors import NotReady, UnknownLanguage
from service.platform.ratelimit import FailureLimiter, RateLimiter
from service.platform.settings import Settings
from service.state.durable import DurableStore
from service.state.durable.access import AccessStore
from service.state.risk_catalog import ModelCatalog

__all__ = ["Resources", "open_queue"]

logger = logging.getLogger("trisk.resources")


@dataclass
class Resources:
    """What request handlers need: the novelty indexes (one per language), Redis, the job queue, the durable store
    and the risk-model catalog (handlers receive them as dependencies, ``service.app.deps``)."""

    settings: Settings
    indexes: dict[str, NoveltyIndex] = field(default_factory=dict)
    index_errors: dict[str, str] = field(default_factory=dict)
    redis: Redis | None = None
    queue: Any = None  # arq.ArqRedis, typed loosely to keep arq out of the core
    db: DurableStore | None = None
    access: AccessStore | None = None  # API keys and callback secrets (on the durable store)
    keys: KeyCache | None = None
    rate_limiter: RateLimiter | None = None
    auth_failures: FailureLimiter | None = None  # failed authentications per client address (the ceiling)
    key_failures: FailureLimiter | None = None  # ... per presented key id
    catalog: ModelCatalog | None = None
    started_at: float = field(default_factory=time.time)
    load_seconds: float = 0.0

    def index_for(self, lang: str) -> NoveltyIndex:
        code = get_normaliser(lang).lang  # raises UnknownLanguage for codes that are not ISO 639
        index = self.indexes.get(code)
        if index is None:
            if not self.indexes:
                raise NotReady("no novelty index is loaded", extra={"errors": self.index_errors})
            raise UnknownLanguage(
                f"no novelty index for language {code!r}; indexed: {', '.join(sorted(self.indexes))}",
                extra={"indexed_languages": sorted(self.indexes)},
            )
        return index


async def open_queue(settings: Settings) -> Any:
    """The ARQ pool jobs are enqueued on; None (reported by ready and by 503s) when Redis does not answer yet."""
    from arq import create_pool
    from arq.connections import RedisSettings as ArqRedisSettings

    # fail fast: the API must not hang for arq's default five connection retries
    redis_settings = dataclasses.replace(ArqRedisSettings.from_dsn(settings.redis.url), conn_retries=0, conn_timeout=2)
    try:
        return await create_pool(
            redis_settings,
            default_queue_name=settings.redis.queue_name,
        )
    except Exception as exc:  # the API still serves novelty without Redis
        logger.error("job queue not connected: %s", exc)
        return None
