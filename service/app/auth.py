"""Who is calling and may they: the API key (401), per-route scopes (403, declared once with ``access`` so the guard
and the OpenAPI document cannot disagree), and the rate limits (429) with their headers.

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

from service.app.problems import problem_responses
from service.core.auth import ApiKey, Principal, authenticate
from service.core.auth import Scope as KeyScope
from service.core.errors import MalformedRequest, NotReady, TooManyRequests, Unauthorized
from service.core.ratelimit import RateLimiter
from service.core.telemetry import RATE_LIMITED, TENANT

__all__ = [
    "RATELIMIT_HEADERS",
    "SECURITY_SCHEMES",
    "KeyCache",
    "access",
    "admit",
    "authenticate_request",
    "key_cache",
    "principal_of",
    "single_query_values",
]

RATELIMIT_HEADERS = "trisk_ratelimit_headers"  # where the guard leaves the headers in the request's scope state
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


def key_cache(connection: ASGIConnection[Any, Any, Any, Any]) -> KeyCache:
    keys: KeyCache | None = getattr(connection.app.state.resources, "keys", None)
    if keys is None:
        raise NotReady("the key store is not open")
    return keys


async def authenticate_request(connection: ASGIConnection[Any, Any, Any, Any], token: str | None = None) -> Principal:
    """The caller's key (401 when missing or invalid), then one request of its rate limits (429); the rate-limit
    headers wait in the scope for ``RequestContextMiddleware`` to put on the answer, whatever it is. Runs as the
    route's guard, inside the route's exception handling, so a refusal is an ordinary problem+json response.
    ``token``: a key given otherwise than in the request's headers (the workbench's sign-in form)."""
    user = connection.scope.get("user")
    if isinstance(user, Principal):
        return user
    keys = key_cache(connection)
    principal = await asyncio.to_thread(authenticate, token if token is not None else _token(connection), keys.find)
    return await admit(connection, principal)


async def admit(connection: ASGIConnection[Any, Any, Any, Any], principal: Principal) -> Principal:
    """The request is ``principal``'s (tenant, logs, last use), within its rate limits (429): the one way in, for a
    key in the headers and for a workbench session alike."""
    resources = connection.app.state.resources
    keys = key_cache(connection)
    connection.scope["user"] = principal
    connection.scope["auth"] = principal
    TENANT.set(principal.tenant)  # this request's task only: every log line of the request names the tenant
    await asyncio.to_thread(keys.touch, principal.key_id)
    limiter: RateLimiter | None = getattr(resources, "rate_limiter", None)
    if limiter is not None and limiter.enabled:
        decision = await limiter.check(principal.key_id, principal.tenant)
        connection.scope.setdefault("state", {})[RATELIMIT_HEADERS] = decision.headers
        if not decision.allowed:
            RATE_LIMITED.labels(decision.limited_by).inc()
            raise TooManyRequests(
                f"rate limit of this {decision.limited_by} reached; retry in {decision.retry_after} s",
                retry_after=decision.retry_after,
                extra={"limit": decision.limited_by},
            )
    return principal


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    user = connection.scope.get("user")
    if not isinstance(user, Principal):
        raise Unauthorized("an API key is required: send Authorization: Bearer <key> or X-API-Key: <key>")
    return user


def single_query_values(connection: ASGIConnection[Any, Any, Any, Any]) -> None:
    """No route takes a list in its query: a parameter given twice is malformed, not silently one of its values."""
    for name in connection.query_params:
        values = connection.query_params.getall(name)
        if len(values) > 1:
            raise MalformedRequest(f"query parameter {name!r} is given {len(values)} times; give it once")


def _guard(scope: KeyScope) -> Any:
    async def guard(connection: ASGIConnection[Any, Any, Any, Any], _: BaseRouteHandler) -> None:
        (await authenticate_request(connection)).require(scope)
        single_query_values(connection)

    guard.__name__ = f"requires_{scope}"
    return guard


def access(scope: KeyScope) -> dict[str, Any]:
    """The route's required scope, declared once: the guard that enforces it and the OpenAPI security requirement
    that documents it (OpenAPI 3.1 lets a non-OAuth scheme list role names, here the scope)."""
    return {
        "guards": [_guard(scope)],
        "security": [{name: [scope]} for name in SECURITY_SCHEMES],
        "opt": {"scope": scope},
        "responses": problem_responses(),
    }
