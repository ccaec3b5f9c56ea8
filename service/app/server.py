"""The HTTP server's own bound on a request head (request line and headers): uvicorn's httptools protocol buffers a
head of any size (a 10 MB header was accepted). Past ``TRISK_MAX_HEADER_BYTES`` the connection gets a 431
problem+json and is closed, before the rest is read."""

from __future__ import annotations

import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

__all__ = ["bounded_http_protocol", "head_too_large"]


def head_too_large(limit: int) -> bytes:
    """The whole answer to an over-long head: 431, problem+json, connection closed."""
    body = json.dumps(
        {
            "type": "about:blank",
            "title": "Request header fields too large",
            "status": 431,
            "detail": f"the request line and headers are over {limit} bytes (TRISK_MAX_HEADER_BYTES)",
            "limit": limit,
        }
    ).encode()
    head = (
        "HTTP/1.1 431 Request Header Fields Too Large\r\n"
        "content-type: application/problem+json\r\n"
        f"content-length: {len(body)}\r\n"
        "connection: close\r\n\r\n"
    )
    return head.encode() + body


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

    return BoundedHttpToolsProtocol
