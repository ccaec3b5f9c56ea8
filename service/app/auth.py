"""Who is calling and may they: the API-key middleware (401), per-route scopes (403, declared once with ``access``
so the guard and the OpenAPI document cannot disagree), and the rate limits (429) with their headers.

Every route needs a key except ``/health/*`` and the OpenAPI documents (``/schema``). The key decides the tenant:
handlers get it as the ``tenant`` dependency and never from the request body.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from service.core.auth import ApiKey, Principal, authenticate
from service.core.auth import Scope as KeyScope
from service.core.errors import NotReady, TooManyRequests, Unauthorized
from service.core.ratelimit import RateLimiter
from service.core.telemetry import RATE_LIMITED, log_context

__all__ = ["SECURITY_SCHEMES", "AuthMiddleware", "KeyCache", "access", "principal_of"]

SECURITY_SCHEMES = ("bearerAuth", "apiKeyHeader")


class KeyCache:
    """Key records by id, read from the durable store at most every ``ttl`` seconds (a revoked key stops working
    within that time), and last-used times written at most once a minute per key."""

    def __init__(self, store: Any, ttl: float = 5.0) -> None:
        self.store = store
        self.ttl = ttl
        self._lock = threading.Lock()
        self._keys: dict[str, tuple[float, ApiKey | None]] = {}
        self._touched: dict[str, float] = {}

    def find(self, key_id: str) -> ApiKey | None:
        now = time.monotonic()
        with self._lock:
            hit = self._keys.get(key_id)
            if hit is not None and now - hit[0] < self.ttl:
                return hit[1]
        key = self.store.find_key(key_id)
        with self._lock:
            self._keys[key_id] = (now, key)
        return key

    def forget(self, key_id: str) -> None:
        with self._lock:
            self._keys.pop(key_id, None)

    def touch(self, key_id: str) -> None:
        now = time.time()
        with self._lock:
            if now - self._touched.get(key_id, 0.0) < 60.0:
                return
            self._touched[key_id] = now
        self.store.touch_key(key_id, now)


def _token(connection: ASGIConnection[Any, Any, Any, Any]) -> str | None:
    header = connection.headers.get("authorization")
    if header:
        kind, _, value = header.partition(" ")
        return value.strip() if kind.lower() == "bearer" else header
    return connection.headers.get("x-api-key")


class AuthMiddleware:
    """Resolves the caller's key (401 when missing or invalid), then spends one request of its rate limits; the
    rate-limit headers go on the answer, whatever it is."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or path.startswith("/health/") or path.startswith("/schema"):
            await self.app(scope, receive, send)
            return
        connection: ASGIConnection[Any, Any, Any, Any] = ASGIConnection(scope)
        principal, headers = await self.authenticate(connection)
        scope["user"] = principal
        scope["auth"] = principal

        async def send_with_limits(message: Message) -> None:
            if message["type"] == "http.response.start" and headers:
                message = {**message, "headers": [*message.get("headers", []), *_encode(headers)]}
            await send(message)

        with log_context(tenant=principal.tenant):
            await self.app(scope, receive, send_with_limits)

    async def authenticate(self, connection: ASGIConnection[Any, Any, Any, Any]) -> tuple[Principal, dict[str, str]]:
        resources = connection.app.state.resources
        keys: KeyCache | None = getattr(resources, "keys", None)
        if keys is None:
            raise NotReady("the key store is not open")
        principal = await asyncio.to_thread(authenticate, _token(connection), keys.find)
        await asyncio.to_thread(keys.touch, principal.key_id)
        limiter: RateLimiter | None = getattr(resources, "rate_limiter", None)
        if limiter is None or not limiter.enabled:
            return principal, {}
        decision = await limiter.check(principal.key_id, principal.tenant)
        if not decision.allowed:
            RATE_LIMITED.labels(decision.limited_by).inc()
            raise TooManyRequests(
                f"rate limit of this {decision.limited_by} reached; retry in {decision.retry_after} s",
                retry_after=decision.retry_after,
                extra={"limit": decision.limited_by, "ratelimit": decision.headers},
            )
        return principal, decision.headers


def _encode(headers: dict[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in headers.items()]


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    user = connection.scope.get("user")
    if not isinstance(user, Principal):
        raise Unauthorized("an API key is required: send Authorization: Bearer <key> or X-API-Key: <key>")
    return user


def _guard(scope: KeyScope) -> Any:
    def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        principal_of(connection).require(scope)

    guard.__name__ = f"requires_{scope}"
    return guard


def access(scope: KeyScope) -> dict[str, Any]:
    """The route's required scope, declared once: the guard that enforces it and the OpenAPI security requirement
    that documents it (OpenAPI 3.1 lets a non-OAuth scheme list role names, here the scope)."""
    return {
        "guards": [_guard(scope)],
        "security": [{name: [scope]} for name in SECURITY_SCHEMES],
        "opt": {"scope": scope},
    }
