"""The one place where errors become HTTP: problem+json (RFC 9457) for the trisk tree and Litestar's own errors."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Any

import msgspec
from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.openapi import ResponseSpec
from litestar.status_codes import HTTP_400_BAD_REQUEST, HTTP_500_INTERNAL_SERVER_ERROR

from service.platform.errors import TriskError
from service.platform.redact import scrub
from service.platform.redis_client import REDIS_UNAVAILABLE, redis_unavailable

__all__ = [
    "PROBLEM_JSON",
    "PROBLEM_STATUSES",
    "Problem",
    "exception_handlers",
    "problem",
    "problem_for",
    "problem_responses",
]

PROBLEM_JSON = "application/problem+json"
logger = logging.getLogger("trisk.problems")


class Problem(msgspec.Struct):
    """An error (RFC 9457 problem details); many carry further members naming what was wrong (``field``,
    ``limit``, ``required_scope``, ``retry_after``, ...)."""

    type: str
    title: str
    status: int
    detail: str
    instance: str | None = None


# what each status means in this API: every route documents the ones it can answer
PROBLEM_STATUSES: dict[int, str] = {
    400: "the request is malformed: not JSON, wrong types, unknown or missing fields",
    401: "no API key, or one that is unknown, revoked or expired",
    403: "the API key lacks the scope this route needs",
    404: "no such object for this tenant (another tenant's id answers the same)",
    409: (
        "a conflict: an Idempotency-Key reused with another body, a lease of another reviewer, a key revoking itself "
        "or its tenant's last admin key"
    ),
    413: "the body or a text is over its documented limit",
    415: "a body in another media type than the route takes (application/json; application/x-ndjson for NDJSON)",
    422: "the request is well-formed but cannot be done: empty or over-long texts, unknown languages or checks",
    429: "a rate limit was reached; Retry-After says when to try again",
    503: "a dependency (Redis, the durable store, the index) is not available; retry later",
}


def problem_responses(statuses: Iterable[int] = PROBLEM_STATUSES) -> dict[int, ResponseSpec]:
    """The OpenAPI description of a route's error answers (all problem+json)."""
    return {
        status: ResponseSpec(
            data_container=Problem,
            description=PROBLEM_STATUSES[status],
            media_type=PROBLEM_JSON,
            generate_examples=False,
        )
        for status in statuses
    }


def problem(
    status: int,
    title: str,
    detail: str,
    request: Request[Any, Any, Any] | None = None,
    *,
    response_headers: dict[str, str] | None = None,
    **extra: Any,
) -> Response[Any]:
    # no credential in an answer, whatever a dependency's error message quoted (service.platform.redact)
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": scrub(detail)}
    if request is not None:
        body["instance"] = request.url.path
    body.update({k: scrub(v) if isinstance(v, str) else v for k, v in extra.items() if v is not None})
    headers = dict(response_headers or {})
    if "retry_after" in extra and extra["retry_after"] is not None:
        headers["Retry-After"] = str(int(max(1, round(float(extra["retry_after"])))))
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="trisk"'

    return Response(content=body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _trisk_error(request: Request[Any, Any, Any], exc: TriskError) -> Response[Any]:
    extra: dict[str, Any] = dict(exc.extra)
    if exc.retry_after is not None:
        extra["retry_after"] = exc.retry_after
    if exc.status_code >= 500:
        logger.warning("%s on %s: %s", type(exc).__name__, request.url.path, exc.detail)
    return problem(exc.status_code, exc.title, exc.detail, request, **extra)


def _redis_away(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    # wherever a handler, guard or dependency touched Redis while it restarts or refuses writes (full, read-only):
    # a 503 to retry, never a 500
    return _trisk_error(request, redis_unavailable(exc))


def _validation_error(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    # malformed JSON, wrong types, unknown or missing fields: the request is structurally wrong (400)
    errors = exc.extra if isinstance(exc.extra, list) else None
    detail = exc.detail or "the request does not match the schema"
    if errors:
        detail = "; ".join(_error_text(e) for e in errors)
    return problem(HTTP_400_BAD_REQUEST, "Bad request", detail, request, errors=errors)


def _error_text(error: Any) -> str:
    """One validation error in words, naming where it is when the message does not (``at callback_events[0]``)."""
    if not isinstance(error, dict):
        return str(error)
    message, key = str(error.get("message", error)), error.get("key")
    return f"{message} (at {key})" if key and str(key) not in message else message


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    title = {404: "Not found", 405: "Method not allowed", 413: "Payload too large", 415: "Unsupported media type"}.get(
        exc.status_code, "Request error"
    )
    # the exception's own headers (Allow on a 405) are part of the answer
    return problem(exc.status_code, title, exc.detail or title, request, response_headers=dict(exc.headers or {}))


def _recursion(request: Request[Any, Any, Any], exc: RecursionError) -> Response[Any]:
    # msgspec decodes a body nested past the interpreter's recursion limit (about 1,000 levels) by raising this: the
    # client's error, answered without a traceback; any other RecursionError is ours
    if "deserializing" in str(exc):
        return problem(HTTP_400_BAD_REQUEST, "Bad request", "the JSON body is nested too deeply", request)
    return _unexpected(request, exc)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    logger.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return problem(HTTP_500_INTERNAL_SERVER_ERROR, "Internal error", "an unexpected error occurred", request)


exception_handlers: dict[Any, Any] = {
    TriskError: _trisk_error,
    **dict.fromkeys(REDIS_UNAVAILABLE, _redis_away),
    ValidationException: _validation_error,
    NotFoundException: _http_error,
    HTTPException: _http_error,
    RecursionError: _recursion,
    Exception: _unexpected,
}


def problem_for(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    """The problem+json answer the API gives for ``exc`` (the handler of its nearest class above): for a page that
    shows the same status, title and wording."""
    for cls in type(exc).__mro__:
        handler = exception_handlers.get(cls)
        if handler is not None:
            response: Response[Any] = handler(request, exc)
            return response
    return _unexpected(request, exc)
