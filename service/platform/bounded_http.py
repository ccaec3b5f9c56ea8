"""Outbound HTTP that the other side cannot stretch: one total deadline for the whole exchange (httpx's timeouts are
per read, so a peer that drips a byte at a time never trips them) and a cap on the bytes read of the answer (a peer
that streams without end would otherwise fill the process's memory).

Every call the service makes on a tenant's behalf (callbacks) or to a provider (LLM judges, remote embeddings) goes
through ``apost`` or ``post``. The body is read raw, never decoded by httpx: a gzip or deflate answer is inflated here
with the cap applied to the inflated bytes (a small compressed answer may not become a large one), any other content
coding is refused. A deadline that passes raises ``httpx.ReadTimeout``, an answer over the cap ``ResponseTooLarge`` (an
``httpx.HTTPError``), so callers' existing handling of httpx errors covers both.
"""

from __future__ import annotations

import asyncio
import json
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx

__all__ = ["BoundedResponse", "ResponseTooLarge", "apost", "post"]

# we ask for the body as it is; a server that compresses anyway is inflated under the cap
_IDENTITY = {"accept-encoding": "identity"}


class ResponseTooLarge(httpx.HTTPError):
    """The answer's body is over the cap of this call."""


@dataclass(frozen=True)
class BoundedResponse:
    """What was read of an answer: status, headers, at most ``limit`` bytes of body (``truncated`` when more came)."""

    status_code: int
    headers: httpx.Headers
    content: bytes
    truncated: bool
    request: httpx.Request

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body as JSON (a ValueError when it is not), as ``httpx.Response.json``."""
        return json.loads(self.content)


class _Body:
    """Collects a body chunk by chunk up to ``limit`` (inflated bytes); says when to stop reading."""

    def __init__(self, response: httpx.Response, limit: int) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0
        self.truncated = False
        coding = response.headers.get("content-encoding", "identity").strip().lower()
        if coding in ("", "identity"):
            self._inflate: Any = None
        elif coding in ("gzip", "x-gzip", "deflate"):
            self._inflate = zlib.decompressobj(47)  # wbits 47: a gzip or a zlib header, whichever it is
        else:
            raise ResponseTooLarge(f"answer in content coding {coding!r}, which is not read")

    def add(self, chunk: bytes) -> bool:
        """Take a raw chunk; False once the cap is reached (stop reading)."""
        room = self.limit - self.size
        if self._inflate is not None:
            chunk = self._inflate.decompress(chunk, room + 1)  # never inflate more than one byte past the cap
        if len(chunk) > room:
            chunk, self.truncated = chunk[:room], True
        self.parts.append(chunk)
        self.size += len(chunk)
        return not self.truncated

    def result(self, response: httpx.Response, *, strict: bool) -> BoundedResponse:
        if self.truncated and strict:
            raise ResponseTooLarge(f"answer over {self.limit} bytes")
        content = b"".join(self.parts)
        return BoundedResponse(response.status_code, response.headers, content, self.truncated, response.request)


async def apost(
    client: httpx.AsyncClient,
    url: str,
    *,
    limit: int,
    total_seconds: float,
    strict: bool = True,
    headers: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> BoundedResponse:
    """POST and read at most ``limit`` bytes of the answer, all within ``total_seconds`` (connecting, sending, waiting
    and reading). ``strict``: an answer over the cap is ResponseTooLarge; otherwise it is cut (``truncated``)."""
    try:
        async with asyncio.timeout(total_seconds):
            async with client.stream("POST", url, headers={**_IDENTITY, **(headers or {})}, **kwargs) as response:
                body = _Body(response, limit)
                async for chunk in response.aiter_raw():
                    if not body.add(chunk):
                        break
                return body.result(response, strict=strict)
    except TimeoutError as exc:
        raise httpx.ReadTimeout(f"no whole answer within {total_seconds:g} s") from exc


def post(
    client: httpx.Client,
    url: str,
    *,
    limit: int,
    total_seconds: float,
    strict: bool = True,
    headers: Mapping[str, str] | None = None,
    **kwargs: Any,
) -> BoundedResponse:
    """``apost`` for blocking code. The deadline is checked between reads, so a call ends at most one read timeout
    (the client's, which callers keep at most ``total_seconds``) after it."""
    deadline = time.monotonic() + total_seconds
    with client.stream("POST", url, headers={**_IDENTITY, **(headers or {})}, **kwargs) as response:
        body = _Body(response, limit)
        for chunk in response.iter_raw():
            if not body.add(chunk):
                break
            if time.monotonic() > deadline:
                raise httpx.ReadTimeout(f"no whole answer within {total_seconds:g} s", request=response.request)
        return body.result(response, strict=strict)
