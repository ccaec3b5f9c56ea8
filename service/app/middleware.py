"""The outermost layer of every request: a request id (logs and the ``X-Request-ID`` header), latency and status
metrics per route template, and the security headers every response carries."""

from __future__ import annotations

import re
import time
import uuid
from typing import Any

from litestar.types import ASGIApp, Message, Receive, Scope, Send

from service.core.telemetry import HTTP_DURATION, HTTP_REQUESTS, log_context

__all__ = ["SECURITY_HEADERS", "RequestContextMiddleware"]

# an API that serves JSON to programs: no sniffing, no framing, no referrers, no caching of tenant data
SECURITY_HEADERS: tuple[tuple[bytes, bytes], ...] = (
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
    (b"cross-origin-resource-policy", b"same-origin"),
    (b"cache-control", b"no-store"),
)
# the interactive docs page loads its scripts from the page itself; everything else may load nothing
_API_CSP = (b"content-security-policy", b"default-src 'none'; frame-ancestors 'none'")
_REQUEST_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class RequestContextMiddleware:
    """Pure ASGI middleware (so it also wraps error responses and streams)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID.match(given) else uuid.uuid4().hex
        started = time.perf_counter()
        status = {"code": 500}
        docs = scope["path"].startswith("/schema")

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
                headers = list(message.get("headers", []))
                present = {k.lower() for k, _ in headers}
                extra = [*SECURITY_HEADERS, (b"x-request-id", request_id.encode())]
                if not docs:
                    extra.append(_API_CSP)
                headers += [(k, v) for k, v in extra if k not in present]
                message = {**message, "headers": headers}
            await send(message)

        with log_context(request_id=request_id):
            try:
                await self.app(scope, receive, send_with_headers)
            finally:
                route = _route(scope)
                method = str(scope.get("method", "GET"))
                HTTP_REQUESTS.labels(method, route, str(status["code"])).inc()
                HTTP_DURATION.labels(method, route).observe(time.perf_counter() - started)


def _route(scope: Any) -> str:
    """The route template (``/v1/assessments/{assessment_id:str}``), never the raw path: ids would explode the
    metric's label set. Unmatched paths share one label."""
    template = scope.get("path_template")
    return str(template) if template else "unmatched"
