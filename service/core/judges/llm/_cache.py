"""Redis cache of chat answers keyed by sha256(scope, model, prompt version, prompt text, temperature).

The scope is the tenant the call is charged to: answers are never shared between tenants, so a hit (which the
results show, and which costs nothing and answers at once) cannot tell a tenant that another submitted the same text.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

import msgspec
import redis.exceptions

from service.core.judges.llm._client import ChatMessage, ChatResult

if TYPE_CHECKING:
    from redis.asyncio import Redis

__all__ = ["ResponseCache", "cache_key", "prompt_text"]

logger = logging.getLogger("trisk.llm")

_RESULT_DECODER = msgspec.json.Decoder(ChatResult)


def prompt_text(messages: Sequence[ChatMessage]) -> str:
    """The exact prompt as one canonical string (roles and contents, JSON-encoded so nothing is ambiguous)."""
    return msgspec.json.encode([[m.role, m.content] for m in messages]).decode()


def cache_key(
    *, model: str, prompt_version: str, messages: Sequence[ChatMessage], temperature: float, scope: str = ""
) -> str:
    """Hex sha256 of whose cache it is and the four things that determine an answer; temperature is rounded to 6
    decimals."""
    material = msgspec.json.encode([scope, model, prompt_version, prompt_text(messages), round(float(temperature), 6)])
    return hashlib.sha256(material).hexdigest()


class ResponseCache:
    """Stores successful answers; a Redis outage degrades to misses (the cache saves money, it is not truth)."""

    def __init__(self, redis: Redis, *, prefix: str = "trisk:llm:cache:", ttl_seconds: int = 30 * 24 * 3600) -> None:
        self.redis = redis
        self.prefix = prefix
        self.ttl_seconds = ttl_seconds

    def key(
        self, *, model: str, prompt_version: str, messages: Sequence[ChatMessage], temperature: float, scope: str = ""
    ) -> str:
        return self.prefix + cache_key(
            model=model, prompt_version=prompt_version, messages=messages, temperature=temperature, scope=scope
        )

    async def get(self, key: str) -> ChatResult | None:
        try:
            raw = await self.redis.get(key)
        except (redis.exceptions.RedisError, OSError) as exc:
            logger.warning("llm cache read failed, treating as a miss: %s", exc)
            return None
        if raw is None:
            return None
        try:
            result = _RESULT_DECODER.decode(raw)
        except (msgspec.DecodeError, msgspec.ValidationError):
            logger.warning("llm cache entry %s is unreadable, ignoring it", key)
            return None
        return msgspec.structs.replace(result, cached=True, attempts=0)

    async def set(self, key: str, result: ChatResult) -> None:
        try:
            await self.redis.set(
                key, msgspec.json.encode(result), ex=self.ttl_seconds if self.ttl_seconds > 0 else None
            )
        except (redis.exceptions.RedisError, OSError) as exc:
            logger.warning("llm cache write failed: %s", exc)
