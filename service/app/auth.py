"""Who is calling and may they: the API key (401), per-route scopes (403, declared once with ``access`` so the guard
and the OpenAPI document cannot disagree), and the rate limits (429) with their headers.

Every route needs a key except ``/health/*`` and the OpenAPI documents (``/schema``). The key decides the tenant:
handlers get it as the ``tenant`` dependency and never from the request body. Failed authentications are counted
per presented key id (``TRISK_AUTH_FAILURES_PER_KEY``) and per client address (``TRISK_AUTH_FAILURES_PER_MINUTE``,
higher); past either, failures get 429 (with Retry-After) until the minute ends, while a valid key still passes.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import OrderedDict
from typing import Any

from litestar.connection import ASGIConnection
from litestar.handlers.base import BaseRouteHandler

from service.app.problems import problem_responses
from service.platform.auth import ApiKey, Principal, authenticate, parse_token
from service.platform.auth import Scope as KeyScope
from service.platform.errors import Forbidden, MalformedRequest, NotReady, TooManyRequests, Unauthorized
from service.platform.ratelimit import RateLimiter
from service.platform.telemetry import RATE_LIMITED, TENANT

__all__ = [
    "RATELIMIT_HEADERS",
    "SECURITY_SCHEMES",
    "KeyCache",
    "access",
    "admit",
    "authenticate_request",
    "key_cache",
    "principal_of",
    "require_operator",
    "reviewer_of",
    "single_query_values",
]

RATELIMIT_HEADERS = "trisk_ratelimit_headers"  # where the guard leaves the headers in the request's scope state
SECURITY_SCHEMES = ("bearerAuth", "apiKeyHeader")


class NotCached(LookupError):
    """A key id :class:`KeyCache` would have to read from the database."""


class KeyCache:
    """Key records by id, read from the durable store at most every ``ttl`` seconds (a revoked key stops working
    within that time), and last-used times written at most once a minute per key.

    Bounded: at most ``max_items`` known keys and, apart from them, ``max_items`` unknown ids (a miss is remembered
    too, so asking for the same unknown id again costs no database read), each least recently used first out. A flood
    of random key ids therefore churns the unknown ids only and never grows the process, nor pushes real keys out."""

    def __init__(self, store: Any, ttl: float = 5.0, max_items: int = 10_000) -> None:
        self.store = store
        self.ttl = ttl
        self.max_items = max(1, max_items)
        self._lock = threading.Lock()
        self._keys: OrderedDict[str, tuple[float, ApiKey]] = OrderedDict()
        self._unknown: OrderedDict[str, float] = OrderedDict()
        self._touched: OrderedDict[str, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._keys) + len(self._unknown)

    def find(self, key_id: str) -> ApiKey | None:
        now = time.monotonic()
        try:
            return self.cached(key_id)
        except NotCached:
            pass
        key = self.store.find_key(key_id)
        with self._lock:
            self._keys.pop(key_id, None)
            self._unknown.pop(key_id, None)
            table: OrderedDict[str, Any] = self._keys if key is not None else self._unknown
            table[key_id] = (now, key) if key is not None else now
            while len(table) > self.max_items:
                table.popitem(last=False)
        return key

    def cached(self, key_id: str) -> ApiKey | None:
        """The record of ``key_id`` as :meth:`find` would give it, from memory only; raises :class:`NotCached` when
        finding it needs the database (an id not seen within ``ttl``)."""
        now = time.monotonic()
        with self._lock:
            hit = self._keys.get(key_id)
            if hit is not None and now - hit[0] < self.ttl:
                self._keys.move_to_end(key_id)
                return hit[1]
            missed = self._unknown.get(key_id)
            if missed is not None and now - missed < self.ttl:
                return None
        raise NotCached(key_id)

    def touch_due(self, key_id: str) -> bool:
        """Whether :meth:`touch` would write (a minute since this process last wrote the key's last use)."""
        with self._lock:
            return time.time() - self._touched.get(key_id, 0.0) >= 60.0

    def forget(self, key_id: str) -> None:
        with self._lock:
            self._keys.pop(key_id, None)
            self._unknown.pop(key_id, None)

    def touch(self, key_id: str) -> None:
        now = time.time()
        with self._lock:
            if now - self._touched.get(key_id, 0.0) < 60.0:
                return
            self._touched[key_id] = now
            self._touched.move_to_end(key_id)
            while len(self._touched) > self.max_items:
                self._touched.popitem(last=False)
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
    token = token if token is not None else _token(connection)
    try:
        try:
            # a key seen within the cache's ttl needs no database: checked on the event loop (a sha256), sparing
            # every request a hop to a thread and back
            principal = authenticate(token, keys.cached)
        except NotCached:
            principal = await asyncio.to_thread(authenticate, token, keys.find)
    except Unauthorized:
        if token:
            await _count_failure(connection, token)
        raise
    return await admit(connection, principal)


async def _count_failure(connection: ASGIConnection[Any, Any, Any, Any], token: str) -> None:
    """A failed authentication counts against the key id it presented (``TRISK_AUTH_FAILURES_PER_KEY``) and its
    client address (``TRISK_AUTH_FAILURES_PER_MINUTE``, a coarser and higher ceiling for random ids); past either the
    failure is a 429 until its minute ends, and costs no Redis round trip. Only failures are refused: a valid key is
    checked first and always passes, so one bad client behind an office NAT or a proxy (or one presenting another's
    key id) locks no one else out. A blocked subject's failures still cost a key lookup: none for an id seen within
    the key cache's ttl, one indexed read for a new one (the only way to tell a valid key from a guess)."""
    resources = connection.app.state.resources
    parsed = parse_token(token)
    address = connection.client.host if connection.client else "unknown"
    subjects = (
        ("key", getattr(resources, "key_failures", None), parsed[0] if parsed else None),
        ("address", getattr(resources, "auth_failures", None), address),
    )
    for kind, limiter, subject in subjects:
        if limiter is None or not limiter.enabled or subject is None:
            continue
        # blocked already: refused without counting (the counter is past its limit for this window anyway)
        if wait := limiter.blocked(subject) or await limiter.record(subject):
            raise _too_many_failures(wait, kind) from None


async def admit(connection: ASGIConnection[Any, Any, Any, Any], principal: Principal) -> Principal:
    """The request is ``principal``'s (tenant, logs, last use), within its rate limits (429): the one way in, for a
    key in the headers and for a workbench session alike."""
    resources = connection.app.state.resources
    keys = key_cache(connection)
    connection.scope["user"] = principal
    connection.scope["auth"] = principal
    TENANT.set(principal.tenant)  # this request's task only: every log line of the request names the tenant
    if keys.touch_due(principal.key_id):  # a database write at most once a minute per key: in a thread then
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


_FAILURE_LIMITS = {
    "key": ("auth_failures_key", "with this key id", "TRISK_AUTH_FAILURES_PER_KEY"),
    "address": ("auth_failures", "from this address", "TRISK_AUTH_FAILURES_PER_MINUTE"),
}


def _too_many_failures(wait: int, kind: str) -> TooManyRequests:
    limit, where, setting = _FAILURE_LIMITS[kind]
    RATE_LIMITED.labels(limit).inc()
    return TooManyRequests(
        f"too many failed authentications {where}; retry in {wait} s ({setting})",
        retry_after=wait,
        extra={"limit": limit},
    )


def require_operator(connection: ASGIConnection[Any, Any, Any, Any], settings: Any, why: str) -> None:
    """Routes about the whole process or the workers every tenant shares (/metrics, /v1/workers): an operator
    tenant's admin only (TRISK_OPERATOR_TENANTS), 403 for any other tenant's."""
    operators = [t.strip() for t in settings.api.operator_tenants.split(",") if t.strip()]
    if principal_of(connection).tenant not in operators:
        raise Forbidden(
            f"{why}: only an operator tenant's admin reads them (TRISK_OPERATOR_TENANTS)",
            extra={"required_scope": "admin"},
        )


def principal_of(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    user = connection.scope.get("user")
    if not isinstance(user, Principal):
        raise Unauthorized("an API key is required: send Authorization: Bearer <key> or X-API-Key: <key>")
    return user


def reviewer_of(principal: Principal) -> str:
    """The reviewer a verdict, claim or renewal names: the key (its name and id), never a typed name. The API and the
    workbench both take it from here; when keys name their reviewer themselves, this is where that name is taken."""
    return f"{principal.name[:180]} ({principal.key_id})"


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
