"""The HTTP server's own bound on a request head (request line and headers): uvicorn's httptools protocol buffers a
head of any size (a 10 MB header was accepted). Past ``TRISK_MAX_HEADER_BYTES`` the connection gets a 431
problem+json and is closed, before the rest is read; a head the parser refuses gets a 400 problem+json."""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from service.platform.settings import Settings

__all__ = ["bounded_http_protocol", "head_malformed", "head_too_large", "server_options"]


def _closing_problem(status: int, reason: str, detail: str, **extra: Any) -> bytes:
    """A whole answer the server writes itself, before the app sees a request: problem+json, connection closed."""
    body = json.dumps({"type": "about:blank", "title": reason, "status": status, "detail": detail, **extra}).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


def head_too_large(limit: int) -> bytes:
    """The whole answer to an over-long head: 431, problem+json, connection closed."""
    detail = f"the request line and headers are over {limit} bytes (TRISK_MAX_HEADER_BYTES)"
    return _closing_problem(431, "Request Header Fields Too Large", detail, limit=limit)


def head_malformed(reason: str) -> bytes:
    """The answer to a head the HTTP parser refuses (a control byte such as ESC or DEL in a header, a bad request
    line): 400 problem+json like every other error of the API, not uvicorn's plain text."""
    # the parser's own words are ASCII and name no part of the request, so they are safe to repeat
    return _closing_problem(400, "Bad Request", f"the request head is malformed: {reason}")


def bounded_http_protocol(max_head_bytes: int) -> type[HttpToolsProtocol]:
    """uvicorn's httptools protocol, counting the bytes of each request's head as they arrive."""

    class BoundedHttpToolsProtocol(HttpToolsProtocol):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self._in_head, self._head_bytes = True, 0

        def on_headers_complete(self) -> None:
            self._in_head = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._in_head, self._head_bytes = True, 0  # what comes next on the connection is the next head

        def data_received(self, data: bytes) -> None:
            if self._in_head:
                # the head ends at its first blank line; what follows in the same chunk is the body, which has its
                # own limits (a large POST whose head and body arrive in one read is not a large head). A blank line
                # split over two chunks leaves the whole chunk counted: a bound, not an exact size
                end = data.find(b"\r\n\r\n")
                self._head_bytes += len(data) if end < 0 else end + 4
                if self._head_bytes > max_head_bytes:
                    self.transport.write(head_too_large(max_head_bytes))
                    self.transport.close()
                    return
            super().data_received(data)

        def send_400_response(self, msg: str) -> None:
            self.transport.write(head_malformed(msg))
            self.transport.close()

    return BoundedHttpToolsProtocol


def server_options(settings: Settings) -> dict[str, Any]:
    """uvicorn's options that decide what a request is: the bounded protocol, and forwarded headers believed only
    from ``TRISK_TRUSTED_PROXIES``. uvicorn's default trusts X-Forwarded-For/-Proto from 127.0.0.1, so any process
    on the host (a sidecar, a local proxy) could pick the client address the failed-authentication limits count by,
    and claim https; with no proxies listed the headers are ignored and the peer is the client."""
    trusted = settings.api.trusted_proxy_networks
    return {
        "http": bounded_http_protocol(settings.limits.max_header_bytes),
        "proxy_headers": bool(trusted),
        # uvicorn reads "a.b.c.d/n" as a network and anything it cannot parse as a literal it never matches: the
        # networks go in as parsed (normalised) here, so a typo stops the process instead
        "forwarded_allow_ips": [str(net) for net in trusted] if trusted else [],
    }
