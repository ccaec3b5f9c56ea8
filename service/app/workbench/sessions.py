"""Workbench sessions: a sign-in with an API key becomes a random session token in an HttpOnly cookie; the record
(in Redis) names the key, never holds it, and carries the form token (CSRF). Leases are not the session's: they are
the key's reviewer's, in the review queue's rows, so a second sign-in sees them as hers.

Layout (global: a cookie does not say its tenant):
  trisk:ws:{sha256(token)}      string  the session record (JSON), expiring with the session
  trisk:ws:key:{key id}         zset    the key's sessions by creation time, trimmed to ``MAX_PER_KEY``

Only the token's digest is a Redis key, so reading Redis does not give anyone a live cookie. A session ends at its
expiry (``TRISK_SESSION_SECONDS``, never beyond the key's own expiry), at sign-out, when the key is revoked (checked
on every request through the key cache) or when the key has signed in ``MAX_PER_KEY`` times since.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from typing import Any

import msgspec
from redis.asyncio import Redis

__all__ = ["MAX_PER_KEY", "Session", "SessionStore"]

MAX_PER_KEY = 20  # sessions one key may hold at once: a loop of sign-ins cannot grow Redis without bound


class Session(msgspec.Struct):
    """A signed-in key: whose, until when, and the form token."""

    key_id: str
    tenant: str
    csrf: str
    created_at: float
    expires_at: float

    def csrf_ok(self, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(self.csrf.encode(), given.encode())

    def seconds_left(self, now: float | None = None) -> int:
        return max(0, int(self.expires_at - (time.time() if now is None else now)))


_dec = msgspec.json.Decoder(Session)
_enc = msgspec.json.Encoder()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class SessionStore:
    """Sessions over one Redis connection."""

    def __init__(self, redis: Redis) -> None:
        self.redis: Any = redis  # redis-py's async stubs type every command as sync | async

    async def create(
        self, key_id: str, tenant: str, seconds: int, *, key_expires_at: float | None
    ) -> tuple[str, Session]:
        """A new session for a key that just authenticated; returns the cookie's token (shown nowhere else)."""
        now = time.time()
        expires = now + seconds if key_expires_at is None else min(now + seconds, key_expires_at)
        token = secrets.token_urlsafe(32)
        session = Session(key_id, tenant, secrets.token_urlsafe(24), now, expires)
        ttl = max(1, int(expires - now))
        digest = _digest(token)
        index = f"trisk:ws:key:{key_id}"
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.set(f"trisk:ws:{digest}", _enc.encode(session), ex=ttl)
            pipe.zadd(index, {digest: now})
            pipe.zrange(index, 0, -(MAX_PER_KEY + 1))  # the oldest beyond the cap
            # the index lives as long as its longest session: set when new (NX), extended when longer (GT)
            pipe.expire(index, ttl, nx=True)
            pipe.expire(index, ttl, gt=True)
            res = await pipe.execute()
        stale = [d.decode() if isinstance(d, bytes) else d for d in res[2]]
        if stale:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(*[f"trisk:ws:{d}" for d in stale])
                pipe.zrem(index, *stale)
                await pipe.execute()
        return token, session

    async def get(self, token: str | None) -> Session | None:
        if not token or len(token) > 256:
            return None
        raw = await self.redis.get(f"trisk:ws:{_digest(token)}")
        if raw is None:
            return None
        session = _dec.decode(raw)
        return session if session.expires_at > time.time() else None

    async def delete(self, token: str | None, session: Session | None = None) -> None:
        if not token:
            return
        digest = _digest(token)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.delete(f"trisk:ws:{digest}")
            if session is not None:
                pipe.zrem(f"trisk:ws:key:{session.key_id}", digest)
            await pipe.execute()
