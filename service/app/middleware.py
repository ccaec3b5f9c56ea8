"""Every request's context: a request id (logs and the ``X-Request-ID`` header), latency and status metrics per
route template, the access log, and the headers every response carries (security headers, the request id, and the
rate-limit headers the route's guard left in the scope).

The headers are added by a ``before_send`` hook, which Litestar runs for every answer (a 404 of an unknown path
too); the rest is a middleware around each route."""

from __future__ import annotations

import logging
import re
import time
import uuid
from typing import Any

from litestar import Request
from litestar.datastructures import MutableScopeHeaders
from litestar.enums import RequestEncodingType
from litestar.types import ASGIApp, Message, Receive, Scope, Send

from service.app.auth import RATELIMIT_HEADERS
from service.app.docs import DOCS_CSP
from service.platform.errors import InputError, UnsupportedMediaType
from service.platform.telemetry import HTTP_DURATION, HTTP_REQUESTS, log_context

__all__ = [
    "BODY_MEDIA_TYPE",
    "JSON_BODY",
    "NDJSON_BODY",
    "SECURITY_HEADERS",
    "RequestContextMiddleware",
    "add_response_headers",
    "body_media_type",
    "escaped_nul_at",
    "refuse_nul",
]

access_log = logging.getLogger("trisk.access")
# an API that serves JSON to programs: no sniffing, no framing, no referrers, no caching of tenant data
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
    ("cross-origin-resource-policy", "same-origin"),
    ("cache-control", "no-store"),
)
# answers are data, never a page: they may load nothing (the docs page has its own policy, service/app/docs.py)
_API_CSP = "default-src 'none'; frame-ancestors 'none'"
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_STATE_ID = "trisk_request_id"


def _request_id(scope: Any) -> str:
    """The request's id: the caller's X-Request-ID when it is well-formed, else a new one (once per request)."""
    state = scope.setdefault("state", {})
    rid = state.get(_STATE_ID)
    if rid is None:
        given = dict(scope.get("headers", [])).get(b"x-request-id", b"").decode("latin-1")
        rid = state[_STATE_ID] = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
    return str(rid)


async def add_response_headers(message: Message, scope: Scope) -> None:
    """The ``before_send`` hook: security headers, the request id and the rate-limit headers on every answer."""
    if message["type"] != "http.response.start":
        return
    headers = MutableScopeHeaders.from_message(message)
    for name, value in SECURITY_HEADERS:
        if name not in headers:
            headers[name] = value
    if "content-security-policy" not in headers:
        headers["content-security-policy"] = DOCS_CSP if scope.get("path", "").startswith("/schema") else _API_CSP
    headers["x-request-id"] = _request_id(scope)
    for name, value in scope.get("state", {}).get(RATELIMIT_HEADERS, {}).items():
        headers[name] = value
    if scope.get("method") == "OPTIONS" and "allow" in headers:
        headers["allow"] = _allowed_methods(scope) or headers["allow"]


_NUL = b"\\u0000"


def escaped_nul_at(body: bytes) -> int:
    """Where a JSON body carries an escaped NUL (``\\u0000`` after an even run of backslashes, so inside a string it
    is the escape, not a literal backslash and text), or -1. A raw NUL byte is not JSON at all (a 400 already)."""
    at = body.find(_NUL)
    while at >= 0:
        run = 0
        while at - run - 1 >= 0 and body[at - run - 1] == 0x5C:
            run += 1
        if run % 2 == 0:
            return at
        at = body.find(_NUL, at + 1)
    return -1


JSON_BODY = "application/json"
NDJSON_BODY = "application/x-ndjson"
# a route that reads its body itself names its media type in its handler's opt (a keyword of the route decorator)
BODY_MEDIA_TYPE = "body_media_type"


def body_media_type(handler: Any) -> str | None:
    """The media type a route's body must have: the one its handler names (``body_media_type=``), else JSON for a
    handler whose ``data`` is decoded as JSON; None for a route without a body, or one taking a form (the
    workbench's, whose forms carry the session's CSRF token)."""
    named = getattr(handler, "opt", {}).get(BODY_MEDIA_TYPE)
    if named is not None:
        return str(named)
    signature = getattr(handler, "parsed_fn_signature", None)
    data = signature.parameters.get("data") if signature is not None else None
    if data is None:
        return None
    media = getattr(data.kwarg_definition, "media_type", RequestEncodingType.JSON)
    return JSON_BODY if media == RequestEncodingType.JSON else None


def _refuse_other_media_types(request: Request[Any, Any, Any], body: bytes) -> None:
    """A body in another media type than the route takes is a 415: parsed whatever its Content-Type, a cross-site
    form (``text/plain``, ``application/x-www-form-urlencoded``, ``multipart/form-data``: what a page elsewhere may
    post without asking) could carry JSON to a cookie-authenticated route. An empty body is left to the route's own
    validation (a missing body is a 400 there)."""
    wanted = body_media_type(request.scope.get("route_handler"))
    if wanted is None or not body:
        return
    given = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
    if given != wanted:
        raise UnsupportedMediaType(
            f"this route takes a body of Content-Type {wanted}, not {given or 'none'}",
            extra={"expected": wanted},
        )


async def refuse_nul(request: Request[Any, Any, Any]) -> None:
    """The ``before_request`` hook: a body of the route's media type (415 otherwise), and no text of any request may
    hold U+0000. PostgreSQL refuses it in a text column (a 500 at the write, after the request was accepted) and no
    language writes it; refused here, for every route, before anything is stored (422)."""
    if request.method not in ("POST", "PUT", "PATCH"):
        return
    body = await request.body()
    _refuse_other_media_types(request, body)
    if (at := escaped_nul_at(body)) >= 0:
        raise InputError(
            f"the request holds an escaped NUL (\\u0000) at byte {at}; texts must not contain U+0000",
            extra={"offset": at},
        )


def _allowed_methods(scope: Any) -> str | None:
    """Every method of the requested path. Litestar 2.25's automatic OPTIONS handler lists only the methods of the
    first handler registered for a path (it keeps a stale route): read them from the app's method map instead."""
    handler = scope.get("route_handler")
    app = scope.get("app")
    if handler is None or app is None:
        return None
    methods: set[str] = set()
    for path in getattr(handler, "paths", ()):
        methods |= set(app.route_handler_method_map.get(path, {}))
    return ", ".join(sorted(methods)) if methods else None


class RequestContextMiddleware:
    """Pure ASGI middleware around each route: log context, metrics and the access log."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = {"code": 500}

        async def record_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        with log_context(request_id=_request_id(scope)):
            try:
                await self.app(scope, receive, record_status)
            finally:
                route = _route(scope)
                method = str(scope.get("method", "GET"))
                seconds = time.perf_counter() - started
                HTTP_REQUESTS.labels(method, route, str(status["code"])).inc()
                HTTP_DURATION.labels(method, route).observe(seconds)
                # the route template, never the path (ids) or the query (texts), never a header
                user = scope.get("user")
                with log_context(tenant=getattr(user, "tenant", None)):
                    access_log.info("%s %s %s %.1f ms", method, route, status["code"], seconds * 1000)


def _route(scope: Any) -> str:
    """The route template (``/v1/assessments/{assessment_id}``), never the raw path: ids would explode the metric's
    label set."""
    template = scope.get("path_template")
    return str(template) if template else "unmatched"
