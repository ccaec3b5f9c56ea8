"""The one exception tree of trisk; the web layer maps it to HTTP in one place (service/app/problems.py).

TriskError
 +-- InputError                 bad request content (422 unless a subclass says otherwise)
 |    +-- MalformedRequest      the request's form is wrong where the framework does not see it (400)
 |    +-- PayloadTooLarge       text or body over a documented limit (413)
 |    +-- UnsupportedMediaType  a body in another media type than the route takes (415)
 |    +-- UnknownLanguage       a language no normaliser or index knows (422)
 +-- Unauthorized               no API key, or one that is unknown, revoked or expired (401)
 +-- Forbidden                  a valid key without the scope the route needs (403)
 +-- NotFound                   no such object for this tenant (404)
 +-- Conflict                   idempotency-key reuse with another body, state clash (409)
 +-- TooManyRequests            a rate limit was reached; carries retry_after seconds (429)
 +-- NotReady                   a resource the request needs is not loaded (503)
 |    +-- Unavailable           a dependency is away for now (restarting, failing over): 503 with Retry-After
 |         +-- RedisUnavailable Redis refuses connections, times out or is loading its AOF after a restart
 +-- UpstreamError              a dependency failed (502 unless a subclass says otherwise)
      +-- UpstreamTimeout       it did not answer in time (504)
      +-- UpstreamRateLimited   it said 429; carries retry_after seconds (503)
      +-- UpstreamUnavailable   connection refused, DNS, 5xx after retries (502)
      +-- UpstreamBadResponse   it answered something we cannot use (502)
"""

from __future__ import annotations

__all__ = [
    "Conflict",
    "Forbidden",
    "InputError",
    "MalformedRequest",
    "NotFound",
    "NotReady",
    "PayloadTooLarge",
    "RedisUnavailable",
    "TooManyRequests",
    "TriskError",
    "Unauthorized",
    "Unavailable",
    "UnknownLanguage",
    "UnsupportedMediaType",
    "UpstreamBadResponse",
    "UpstreamError",
    "UpstreamRateLimited",
    "UpstreamTimeout",
    "UpstreamUnavailable",
]


class TriskError(Exception):
    """Base of every error trisk raises on purpose."""

    status_code = 500
    title = "Internal error"
    # seconds a client should wait before trying again (the Retry-After header); None = no such advice
    retry_after: float | None = None

    def __init__(self, detail: str, *, extra: dict[str, object] | None = None) -> None:
        super().__init__(detail)
        self.detail = detail
        self.extra = extra or {}


class InputError(TriskError):
    status_code = 422
    title = "Invalid input"


class MalformedRequest(InputError):
    status_code = 400
    title = "Bad request"


class PayloadTooLarge(InputError):
    status_code = 413
    title = "Payload too large"


class UnsupportedMediaType(InputError):
    status_code = 415
    title = "Unsupported media type"


class UnknownLanguage(InputError):
    status_code = 422
    title = "Unknown language"


class Unauthorized(TriskError):
    status_code = 401
    title = "Unauthorized"


class Forbidden(TriskError):
    status_code = 403
    title = "Forbidden"


class TooManyRequests(TriskError):
    status_code = 429
    title = "Too many requests"

    def __init__(self, detail: str, *, retry_after: float, extra: dict[str, object] | None = None) -> None:
        super().__init__(detail, extra=extra)
        self.retry_after = retry_after


class NotFound(TriskError):
    status_code = 404
    title = "Not found"


class Conflict(TriskError):
    status_code = 409
    title = "Conflict"


class NotReady(TriskError):
    status_code = 503
    title = "Not ready"


class Unavailable(NotReady):
    """A dependency is away for a moment and comes back by itself; nothing of the request was acknowledged."""

    title = "Service unavailable"
    # a Redis restart with its AOF, or a database failover, takes seconds
    retry_after: float | None = 2.0


class RedisUnavailable(Unavailable):
    title = "Redis unavailable"


class UpstreamError(TriskError):
    status_code = 502
    title = "Upstream error"


class UpstreamTimeout(UpstreamError):
    status_code = 504
    title = "Upstream timeout"


class UpstreamRateLimited(UpstreamError):
    status_code = 503
    title = "Upstream rate limited"

    def __init__(self, detail: str, *, retry_after: float | None = None, extra: dict[str, object] | None = None):
        super().__init__(detail, extra=extra)
        self.retry_after = retry_after


class UpstreamUnavailable(UpstreamError):
    status_code = 502
    title = "Upstream unavailable"


class UpstreamBadResponse(UpstreamError):
    status_code = 502
    title = "Upstream bad response"
