"""An OpenAI-compatible ``/v1/embeddings`` client (httpx): batched, bounded retries, errors mapped once.

What callers can get (all from service.platform.errors; the httpx exception, if any, is chained as ``__cause__``):

UpstreamError
 +-- UpstreamTimeout        connect/read/write/pool timeout on every attempt
 +-- UpstreamRateLimited    429 whose Retry-After exceeds ``max_retry_after``, or 429 on the last attempt
 |                          (carries ``retry_after`` seconds when the server sent one)
 +-- UpstreamUnavailable    connection refused, DNS, protocol error, or 5xx after all retries
 +-- UpstreamBadResponse    a non-retryable 4xx, a body that is not the documented JSON, a wrong row count,
                            ragged / non-finite / changing-dimension vectors, an answer over ``max_response_bytes``

Each request has one total deadline (``read_timeout``: a server that drips its answer cannot stretch it) and reads
at most ``max_response_bytes`` (``service.platform.bounded_http``).
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import time
from typing import Any

import httpx
import numpy as np

from service.core.embeddings._base import Kind, check_inputs, l2_normalize
from service.platform.bounded_http import BoundedResponse, ResponseTooLarge, apost, post
from service.platform.errors import (
    NotReady,
    UpstreamBadResponse,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from service.platform.retry import RetryPolicy, parse_retry_after

__all__ = ["OpenAIEmbedder", "embeddings_url"]

_RETRYABLE = (UpstreamTimeout, UpstreamUnavailable, UpstreamRateLimited)


def embeddings_url(base_url: str) -> str:
    """Accept ``http://host``, ``http://host/v1`` or the full ``.../v1/embeddings``."""
    url = base_url.rstrip("/")
    if url.endswith("/embeddings"):
        return url
    if url.endswith("/v1"):
        return url + "/embeddings"
    return url + "/v1/embeddings"


def _error_for_exception(exc: httpx.HTTPError, url: str) -> UpstreamError:
    if isinstance(exc, ResponseTooLarge):
        return UpstreamBadResponse(f"embedding endpoint {url}: {exc}")
    if isinstance(exc, httpx.TimeoutException):
        return UpstreamTimeout(f"embedding endpoint {url} timed out ({type(exc).__name__})")
    return UpstreamUnavailable(f"embedding endpoint {url} unreachable: {type(exc).__name__}: {exc}")


def _error_for_status(response: BoundedResponse, url: str) -> UpstreamError:
    status = response.status_code
    snippet = response.text[:200] if response.content else ""
    if status == 429:
        retry_after = parse_retry_after(response.headers.get("retry-after"))
        return UpstreamRateLimited(f"embedding endpoint {url} rate limited (429)", retry_after=retry_after)
    if status >= 500:
        return UpstreamUnavailable(f"embedding endpoint {url} answered {status}: {snippet}")
    return UpstreamBadResponse(f"embedding endpoint {url} answered {status}: {snippet}")


def _decode_embedding(value: object) -> np.ndarray:
    if isinstance(value, str):  # encoding_format=base64: little-endian float32
        return np.frombuffer(base64.b64decode(value, validate=True), dtype="<f4")
    if isinstance(value, list) and all(isinstance(x, int | float) and not isinstance(x, bool) for x in value):
        return np.asarray(value, dtype=np.float32)
    raise ValueError("embedding is neither a list of numbers nor base64")


def _parse(response: BoundedResponse, expected_rows: int, url: str) -> np.ndarray:
    try:
        body = response.json()
        data = body["data"]
        if not isinstance(data, list) or len(data) != expected_rows:
            raise ValueError(f"expected {expected_rows} embeddings, got {len(data) if isinstance(data, list) else 0}")
        items = sorted(data, key=lambda item: int(item.get("index", 0)))
        if sorted(int(item.get("index", 0)) for item in items) != list(range(expected_rows)):
            raise ValueError("embedding indexes are not 0..n-1")
        rows = [_decode_embedding(item["embedding"]) for item in items]
        if not rows[0].size or any(row.shape != rows[0].shape for row in rows):
            raise ValueError("embeddings are empty or of different lengths")
        matrix = np.stack(rows).astype(np.float32, copy=False)
        if not np.isfinite(matrix).all():
            raise ValueError("embeddings contain NaN or infinity")
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UpstreamBadResponse(f"embedding endpoint {url} sent an unusable body: {exc}") from exc
    return matrix


class OpenAIEmbedder:
    """Embeddings from an OpenAI-compatible server; ``embed`` is blocking, ``aembed`` is the one for workers.

    A 429 or 5xx, a timeout or a refused connection is retried up to ``max_retries`` times by the one outbound
    ``RetryPolicy`` (exponential backoff with jitter, or the server's Retry-After when a 429 sends one; a Retry-After
    longer than ``max_retry_after`` is raised at once as UpstreamRateLimited so the caller can reschedule). Its cap
    is shorter than the LLM client's: an embedding sits inside the cheap tier, which should not wait a minute. Other
    4xx and malformed bodies are not retried. ``dim`` is learnt from the first answer unless given.
    """

    name = "openai"

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api_key: str = "",
        batch_size: int = 32,
        dim: int | None = None,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
        max_retries: int = 4,
        backoff_base: float = 0.5,
        backoff_max: float = 20.0,
        max_retry_after: float = 30.0,
        send_input_type: bool = False,
        query_prefix: str = "",
        passage_prefix: str = "",
        max_response_bytes: int = 8 << 20,
    ) -> None:
        if not base_url:
            raise NotReady("no embedding endpoint configured (TRISK_EMBEDDING_URL)")
        self.url = embeddings_url(base_url)
        self.model = model
        self._api_key = api_key
        self.batch_size = max(1, batch_size)
        self._dim = dim
        self.timeout = httpx.Timeout(read_timeout, connect=connect_timeout)
        self.total_seconds = read_timeout  # for the whole exchange, not each read
        self.max_response_bytes = max_response_bytes
        self.retry = RetryPolicy(
            max_retries=max(0, max_retries),
            backoff_base=backoff_base,
            backoff_max=backoff_max,
            max_retry_after=max_retry_after,
        )
        self.send_input_type = send_input_type
        self._prefixes: dict[str, str] = {"query": query_prefix, "passage": passage_prefix}
        self._client: httpx.Client | None = None
        self._aclient: httpx.AsyncClient | None = None

    @property
    def model_id(self) -> str:
        return self.model

    @property
    def dim(self) -> int:
        if self._dim is None:
            raise NotReady("the remote embedding dimension is known after the first successful call")
        return self._dim

    @property
    def signature(self) -> dict[str, object]:
        return {
            "backend": self.name,
            "model_id": self.model,
            "dim": self._dim,
            "package": "httpx",
            "version": str(httpx.__version__),
            "url": self.url,
            "prefixes": dict(self._prefixes),
        }

    # -- request plumbing shared by the blocking and the async path ------------------------------------------

    def _headers(self) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        return headers

    def _payload(self, batch: list[str], kind: Kind) -> dict[str, Any]:
        prefix = self._prefixes[kind]
        payload: dict[str, Any] = {
            "model": self.model,
            "input": [prefix + text for text in batch] if prefix else batch,
            "encoding_format": "float",
        }
        if self.send_input_type:
            payload["input_type"] = kind
        return payload

    def _bounds(self) -> dict[str, Any]:
        return {"limit": self.max_response_bytes, "total_seconds": self.total_seconds}

    def _batches(self, texts: list[str]) -> list[list[str]]:
        return [texts[i : i + self.batch_size] for i in range(0, len(texts), self.batch_size)]

    def _delay(self, attempt: int, error: UpstreamError) -> float | None:
        """Seconds to wait before the next attempt, or None to give up now."""
        if not isinstance(error, _RETRYABLE):
            return None
        retry_after = error.retry_after if isinstance(error, UpstreamRateLimited) else None
        return self.retry.delay(attempt, retry_after=retry_after)

    def _accept(self, matrix: np.ndarray) -> np.ndarray:
        if self._dim is None:
            self._dim = int(matrix.shape[1])
        elif matrix.shape[1] != self._dim:
            raise UpstreamBadResponse(
                f"embedding endpoint {self.url} changed dimension {self._dim} -> {matrix.shape[1]}"
            )
        return matrix

    def _assemble(self, texts: list[str], unique: list[str], parts: list[np.ndarray]) -> np.ndarray:
        vectors = l2_normalize(np.concatenate(parts, axis=0))
        if len(unique) == len(texts):
            return vectors
        row = {text: i for i, text in enumerate(unique)}
        return vectors[[row[text] for text in texts]]

    # -- blocking -------------------------------------------------------------------------------------------

    def _outcome(
        self, batch: list[str], attempt: int, response: BoundedResponse | None, failure: httpx.HTTPError | None
    ) -> np.ndarray | float:
        """The batch's vectors from a 200, else the seconds to wait before the next attempt; raises the upstream
        error when the policy gives up (shared by the blocking and the async loop, which differ only in how they
        wait)."""
        if response is not None and response.status_code == 200:
            return self._accept(_parse(response, len(batch), self.url))
        if response is not None:
            error = _error_for_status(response, self.url)
        else:
            assert failure is not None  # one of the two is given
            error = _error_for_exception(failure, self.url)
        delay = self._delay(attempt, error)
        if delay is None:
            raise error from failure
        return delay

    def _post(self, batch: list[str], kind: Kind) -> np.ndarray:
        if self._client is None:
            self._client = httpx.Client(timeout=self.timeout, headers=self._headers())
        payload = self._payload(batch, kind)
        for attempt in itertools.count():
            try:
                response, failure = post(self._client, self.url, json=payload, **self._bounds()), None
            except httpx.HTTPError as exc:
                response, failure = None, exc
            outcome = self._outcome(batch, attempt, response, failure)
            if isinstance(outcome, np.ndarray):
                return outcome
            time.sleep(outcome)
        raise AssertionError("unreachable")  # pragma: no cover - itertools.count() does not end

    def embed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray:
        check_inputs(texts, kind)
        if not texts:
            return np.empty((0, self._dim or 0), dtype=np.float32)
        unique = list(dict.fromkeys(texts))
        return self._assemble(texts, unique, [self._post(batch, kind) for batch in self._batches(unique)])

    # -- async ----------------------------------------------------------------------------------------------

    async def _apost(self, batch: list[str], kind: Kind) -> np.ndarray:
        if self._aclient is None:
            self._aclient = httpx.AsyncClient(timeout=self.timeout, headers=self._headers())
        payload = self._payload(batch, kind)
        for attempt in itertools.count():
            try:
                response, failure = await apost(self._aclient, self.url, json=payload, **self._bounds()), None
            except httpx.HTTPError as exc:
                response, failure = None, exc
            outcome = self._outcome(batch, attempt, response, failure)
            if isinstance(outcome, np.ndarray):
                return outcome
            await asyncio.sleep(outcome)
        raise AssertionError("unreachable")  # pragma: no cover - itertools.count() does not end

    async def aembed(self, texts: list[str], kind: Kind = "passage") -> np.ndarray:
        check_inputs(texts, kind)
        if not texts:
            return np.empty((0, self._dim or 0), dtype=np.float32)
        unique = list(dict.fromkeys(texts))
        return self._assemble(texts, unique, [await self._apost(batch, kind) for batch in self._batches(unique)])

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    async def aclose(self) -> None:
        self.close()
        if self._aclient is not None:
            await self._aclient.aclose()
            self._aclient = None

    def __repr__(self) -> str:
        return f"OpenAIEmbedder(url={self.url!r}, model_id={self.model!r})"
