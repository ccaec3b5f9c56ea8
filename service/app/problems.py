"""The one place where errors become HTTP: problem+json (RFC 9457) for the trisk tree and Litestar's own errors."""

from __future__ import annotations

import logging
from typing import Any

from litestar import Request, Response
from litestar.exceptions import HTTPException, NotFoundException, ValidationException
from litestar.status_codes import HTTP_400_BAD_REQUEST, HTTP_500_INTERNAL_SERVER_ERROR

from service.core.errors import TooManyRequests, TriskError, UpstreamRateLimited

__all__ = ["PROBLEM_JSON", "exception_handlers", "problem"]

PROBLEM_JSON = "application/problem+json"
logger = logging.getLogger("trisk.problems")


def problem(
    status: int, title: str, detail: str, request: Request[Any, Any, Any] | None = None, **extra: Any
) -> Response[Any]:
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status, "detail": detail}
    if request is not None:
        body["instance"] = request.url.path
    body.update({k: v for k, v in extra.items() if v is not None})
    headers = {}
    if "retry_after" in extra and extra["retry_after"] is not None:
        headers["Retry-After"] = str(int(max(1, round(float(extra["retry_after"])))))
    if status == 401:
        headers["WWW-Authenticate"] = 'Bearer realm="trisk"'

    return Response(content=body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


def _trisk_error(request: Request[Any, Any, Any], exc: TriskError) -> Response[Any]:
    extra = dict(exc.extra)
    if isinstance(exc, UpstreamRateLimited | TooManyRequests):
        extra["retry_after"] = exc.retry_after
    if exc.status_code >= 500:
        logger.warning("%s on %s: %s", type(exc).__name__, request.url.path, exc.detail)
    return problem(exc.status_code, exc.title, exc.detail, request, **extra)


def _validation_error(request: Request[Any, Any, Any], exc: ValidationException) -> Response[Any]:
    # malformed JSON, wrong types, unknown or missing fields: the request is structurally wrong (400)
    errors = exc.extra if isinstance(exc.extra, list) else None
    detail = exc.detail or "the request does not match the schema"
    if errors:
        detail = "; ".join(str(e.get("message", e)) if isinstance(e, dict) else str(e) for e in errors)
    return problem(HTTP_400_BAD_REQUEST, "Bad request", detail, request, errors=errors)


def _http_error(request: Request[Any, Any, Any], exc: HTTPException) -> Response[Any]:
    title = {404: "Not found", 405: "Method not allowed", 413: "Payload too large", 415: "Unsupported media type"}.get(
        exc.status_code, "Request error"
    )
    return problem(exc.status_code, title, exc.detail or title, request)


def _unexpected(request: Request[Any, Any, Any], exc: Exception) -> Response[Any]:
    logger.exception("unhandled error on %s", request.url.path, exc_info=exc)
    return problem(HTTP_500_INTERNAL_SERVER_ERROR, "Internal error", "an unexpected error occurred", request)


exception_handlers: dict[Any, Any] = {
    TriskError: _trisk_error,
    ValidationException: _validation_error,
    NotFoundException: _http_error,
    HTTPException: _http_error,
    Exception: _unexpected,
}
