"""Async client for OpenAI-compatible chat completions: timeouts, retries, per-provider limits, response cache.

Every failure leaves this module as one of the upstream errors of ``service.platform.errors`` (httpx exceptions are
translated here, once, and chained with ``raise ... from exc``):

UpstreamError
 +-- UpstreamTimeout       connect/read/write/pool timeout on the last attempt
 +-- UpstreamRateLimited   429 on the last attempt, or a Retry-After longer than the policy waits (retry_after set)
 +-- UpstreamUnavailable   connection refused/reset, DNS, 5xx on the last attempt
 +-- UpstreamBadResponse   a 4xx other than 429, or a 200 body that is not a chat completion

Retried: 429, 5xx, timeouts and transport errors, up to ``RetryPolicy.max_retries`` times with exponential
backoff and jitter; a ``Retry-After`` header (seconds or an HTTP date) on 429/503 replaces the backoff.
A call with a ``deadline`` (bounded judge work, ``_guard.py``) waits at most until then: each attempt's timeouts are
cut to the time left, a timeout is not retried, and no backoff sleeps past the deadline.
Not retried: other 4xx and undecodable bodies (the same request would fail the same way).
Bounded: each attempt has one total deadline (the read timeout, or the time left when sooner: a provider that drips
its answer cannot stretch it), at most ``max_response_bytes`` of an answer are read (more is UpstreamBadResponse), and
``max_tokens`` is capped by ``max_tokens_cap`` (TRISK_LLM_MAX_TOKENS), whoever asked for more.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import httpx
import msgspec

from service.platform.bounded_http import BoundedResponse, ResponseTooLarge, apost
from service.platform.errors import (
    UpstreamBadResponse,
    UpstreamError,
    UpstreamRateLimited,
    UpstreamTimeout,
    UpstreamUnavailable,
)
from service.platform.retry import RetryPolicy, parse_retry_after
from service.platform.telemetry import JUDGE_CALLS, JUDGE_TOKENS, LLM_CACHE_HITS

if TYPE_CHECKING:
    from service.platform.ratelimit import Reservation, SpendMeter
    from service.platform.settings import LLMSettings

__all__ = [
    "NO_PROVIDER",
    "AnswerCache",
    "ChatMessage",
    "ChatResult",
    "Endpoint",
    "LLMClient",
    "ProviderStats",
    "RetryPolicy",
    "TokenBucket",
    "Usage",
    "parse_retry_after",
    "prompt_token_bound",
]

logger = logging.getLogger("trisk.llm")
# what every LLM check reads when TRISK_LLM_BASE_URL is unset
NO_PROVIDER = "no LLM provider configured"


class ChatMessage(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One chat message of a prompt."""

    role: Literal["system", "user", "assistant"]
    content: str


class Endpoint(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """Where one judge lives: the provider's base URL (``.../v1``), its bearer key and the model name on it."""

    base_url: str
    api_key: str
    model: str


class Usage(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ChatResult(msgspec.Struct, forbid_unknown_fields=True, frozen=True):
    """One answer. ``latency_ms`` is the upstream round trip of the successful attempt (of the original call
    when ``cached``); ``attempts`` counts upstream HTTP requests made for this answer (0 on a cache hit)."""

    text: str | None
    finish_reason: str | None
    model: str
    usage: Usage
    latency_ms: float
    attempts: int
    cached: bool = False


@dataclass
class ProviderStats:
    """Counters of one provider (a base URL), for tests, benchmarks and metrics."""

    in_flight: int = 0
    max_in_flight: int = 0
    requests: int = 0
    retries: int = 0
    cache_hits: int = 0


class TokenBucket:
    """Requests-per-second limiter: ``rate`` tokens/s, ``burst`` capacity; waiters reserve tokens in FIFO order.

    A reservation may drive the balance negative; the caller then sleeps until its token has accrued, so no
    lock is held across the sleep and waiters do not stampede. ``rate <= 0`` disables the limit.
    """

    def __init__(self, rate: float, burst: float | None = None) -> None:
        self.rate = rate
        self.capacity = burst if burst is not None else max(1.0, rate)
        self._tokens = self.capacity
        self._updated = time.monotonic()

    def reserve(self) -> float:
        """Take one token; returns how long to wait before using it (no await, so atomic under asyncio)."""
        if self.rate <= 0:
            return 0.0
        now = time.monotonic()
        self._tokens = min(self.capacity, self._tokens + (now - self._updated) * self.rate)
        self._updated = now
        self._tokens -= 1.0
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    async def acquire(self) -> None:
        wait = self.reserve()
        if wait > 0:
            await asyncio.sleep(wait)


# chat templates add a few tokens per message (role markers) and a few per prompt (the assistant's turn)
_TEMPLATE_TOKENS_PER_MESSAGE = 8
_TEMPLATE_TOKENS = 8


def prompt_token_bound(messages: Sequence[ChatMessage]) -> int:
    """An upper bound of a prompt's tokens: byte-level BPE and byte-fallback tokenizers never make more tokens than
    the text has UTF-8 bytes; plus the chat template's. Two to four times the real count for English, which only
    matters at the end of a day's budget, where a reservation must not be too small."""
    size = sum(len(m.content.encode("utf-8")) for m in messages)
    return size + _TEMPLATE_TOKENS_PER_MESSAGE * len(messages) + _TEMPLATE_TOKENS


# Upstream bodies are decoded leniently (providers add fields); only the fields we use are declared.
class _Message(msgspec.Struct):
    content: str | None = None


class _Choice(msgspec.Struct):
    message: _Message
    finish_reason: str | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0


class _Completion(msgspec.Struct):
    choices: list[_Choice]
    model: str | None = None
    usage: _Usage | None = None


_COMPLETION_DECODER = msgspec.json.Decoder(_Completion)
_ENCODER = msgspec.json.Encoder()


@dataclass
class _Provider:
    semaphore: asyncio.Semaphore
    bucket: TokenBucket
    stats: ProviderStats = field(default_factory=ProviderStats)


@dataclass
class _Spend:
    """One call's worst case and, once it is about to be sent, its reservation on the tenant's budget."""

    worst: int
    reservation: Reservation | None = None


class _Retryable(Exception):
    """An attempt failed in a way worth retrying; carries the error to raise if it was the last attempt."""

    def __init__(self, error: UpstreamError, retry_after: float | None = None) -> None:
        super().__init__(error.detail)
        self.error = error
        self.retry_after = retry_after


class AnswerCache(Protocol):
    """What the client asks of a cache of answers (``_cache.ResponseCache`` keeps them in Redis)."""

    def key(
        self, *, model: str, prompt_version: str, messages: Sequence[ChatMessage], temperature: float, scope: str = ""
    ) -> str: ...

    async def get(self, key: str) -> ChatResult | None: ...

    async def set(self, key: str, result: ChatResult) -> None: ...


class LLMClient:
    """Chat completions against any number of OpenAI-compatible providers, one shared HTTP connection pool.

    Concurrency (a semaphore around each HTTP request) and rate (a token bucket) are limited per provider,
    i.e. per base URL. The cache is optional (``None`` = off); a hit makes no upstream call.
    """

    def __init__(
        self,
        *,
        max_concurrency: int = 8,
        requests_per_second: float = 10.0,
        burst: float | None = None,
        timeout: httpx.Timeout | None = None,
        retry: RetryPolicy | None = None,
        cache: AnswerCache | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_response_bytes: int = 1 << 20,
        max_tokens_cap: int = 4096,
    ) -> None:
        if max_concurrency < 1:
            raise ValueError("max_concurrency must be at least 1")
        self.max_concurrency = max_concurrency
        self.requests_per_second = requests_per_second
        self.burst = burst
        self.retry = retry or RetryPolicy()
        self.cache = cache
        self.meter: SpendMeter | None = None
        self.max_response_bytes = max_response_bytes
        self.max_tokens_cap = max_tokens_cap
        self._providers: dict[str, _Provider] = {}
        self._http = httpx.AsyncClient(
            timeout=timeout or httpx.Timeout(connect=5.0, read=60.0, write=30.0, pool=30.0),
            # the per-provider semaphores bound the connections; the pool only keeps them alive
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            transport=transport,
            headers={"user-agent": "trisk-llm/1"},
        )

    @classmethod
    def from_settings(
        cls,
        settings: LLMSettings,
        *,
        cache: AnswerCache | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> LLMClient:
        timeout = httpx.Timeout(
            connect=settings.connect_timeout,
            read=settings.read_timeout,
            write=settings.read_timeout,
            pool=settings.read_timeout,
        )
        return cls(
            max_concurrency=settings.max_concurrency,
            requests_per_second=settings.requests_per_second,
            timeout=timeout,
            retry=RetryPolicy(max_retries=settings.max_retries),
            cache=cache,
            transport=transport,
            max_response_bytes=settings.max_response_bytes,
            max_tokens_cap=settings.max_tokens,
        )

    def metered(self, meter: SpendMeter) -> LLMClient:
        """A view of this client that charges upstream calls to a tenant's daily budget (``SpendMeter``): it shares
        the connection pool and the per-provider limits, and the cache under the tenant's own keys (a tenant never gets,
        nor learns of, another's answers). A cache hit costs nothing; a call whose worst case is over the budget raises
        ``SpendExhausted`` before anything is sent. Close the client, not its views."""
        view = copy.copy(self)
        view.meter = meter
        return view

    async def __aenter__(self) -> LLMClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()

    def stats(self, base_url: str) -> ProviderStats:
        return self._provider(base_url).stats

    @property
    def upstream_requests(self) -> int:
        return sum(p.stats.requests for p in self._providers.values())

    def _provider(self, base_url: str) -> _Provider:
        key = base_url.rstrip("/")
        provider = self._providers.get(key)
        if provider is None:
            provider = _Provider(
                asyncio.Semaphore(self.max_concurrency), TokenBucket(self.requests_per_second, self.burst)
            )
            self._providers[key] = provider
        return provider

    async def chat(
        self,
        endpoint: Endpoint,
        messages: Sequence[ChatMessage],
        *,
        temperature: float,
        prompt_version: str,
        max_tokens: int | None = None,
        use_cache: bool = True,
        deadline: float | None = None,
        admit: Callable[[], str | None] | None = None,
    ) -> ChatResult:
        """One chat completion; ``prompt_version`` names the template (part of the cache key); ``deadline`` is a
        ``time.monotonic()`` instant the call must not outlast; ``admit`` is asked once a connection slot is free
        and may refuse the call with a reason (a judge benched while it waited): UpstreamTimeout, nothing sent."""
        if not endpoint.base_url:
            raise UpstreamUnavailable(NO_PROVIDER)
        provider = self._provider(endpoint.base_url)
        cache_key = None
        if self.cache is not None and use_cache:
            cache_key = self.cache.key(
                model=endpoint.model,
                prompt_version=prompt_version,
                messages=messages,
                temperature=temperature,
                scope=self.meter.tenant if self.meter is not None else "",
            )
            hit = await self.cache.get(cache_key)
            if hit is not None:
                provider.stats.cache_hits += 1
                LLM_CACHE_HITS.labels(endpoint.model).inc()
                JUDGE_CALLS.labels(endpoint.model, "cached").inc()
                return hit
        body: dict[str, object] = {
            "model": endpoint.model,
            "messages": [{"role": m.role, "content": m.content} for m in messages],
            "temperature": temperature,
        }
        # bounded whoever sized the call (a request, a panel's judge); unsized calls get the cap, not the provider's
        sized = min(max_tokens, self.max_tokens_cap) if max_tokens is not None else self.max_tokens_cap
        body["max_tokens"] = sized
        spend = _Spend(prompt_token_bound(messages) + sized)
        try:
            result = await self._send_with_retries(provider, endpoint, _ENCODER.encode(body), deadline, admit, spend)
        except BaseException as exc:  # a cancelled call too: nothing answered, so nothing spent that we know of
            if isinstance(exc, UpstreamError):
                JUDGE_CALLS.labels(endpoint.model, "error").inc()
            if spend.reservation is not None and self.meter is not None:
                await self.meter.settle(spend.reservation, 0)
            raise
        JUDGE_CALLS.labels(endpoint.model, "ok").inc()
        JUDGE_TOKENS.labels(endpoint.model, "prompt").inc(result.usage.prompt_tokens)
        JUDGE_TOKENS.labels(endpoint.model, "completion").inc(result.usage.completion_tokens)
        if spend.reservation is not None and self.meter is not None:
            await self.meter.settle(spend.reservation, result.usage.prompt_tokens + result.usage.completion_tokens)
        if cache_key is not None and self.cache is not None:
            await self.cache.set(cache_key, result)
        return result

    async def _send_with_retries(
        self,
        provider: _Provider,
        endpoint: Endpoint,
        payload: bytes,
        deadline: float | None = None,
        admit: Callable[[], str | None] | None = None,
        spend: _Spend | None = None,
    ) -> ChatResult:
        url = endpoint.base_url.rstrip("/") + "/chat/completions"
        headers = {"content-type": "application/json"}
        if endpoint.api_key:
            headers["authorization"] = f"Bearer {endpoint.api_key}"
        policy = self.retry
        attempt = 0
        while True:
            attempt += 1
            try:
                return await self._attempt(provider, endpoint, url, headers, payload, attempt, deadline, admit, spend)
            except UpstreamError as exc:
                exc.extra["attempts"] = attempt
                raise
            except _Retryable as failure:
                failure.error.extra["attempts"] = attempt
                if deadline is not None and isinstance(failure.error, UpstreamTimeout):
                    raise failure.error from failure.__cause__  # a timeout under a deadline counts, it is not retried
                delay = policy.delay(attempt - 1, retry_after=failure.retry_after, deadline=deadline)
                if delay is None:
                    raise failure.error from failure.__cause__
                provider.stats.retries += 1
                logger.info(
                    "llm retry %d/%d for model %s in %.3fs: %s",
                    attempt,
                    policy.max_retries,
                    endpoint.model,
                    delay,
                    failure.error.detail,
                )
                await asyncio.sleep(delay)

    async def _attempt(
        self,
        provider: _Provider,
        endpoint: Endpoint,
        url: str,
        headers: dict[str, str],
        payload: bytes,
        attempt: int,
        deadline: float | None = None,
        admit: Callable[[], str | None] | None = None,
        spend: _Spend | None = None,
    ) -> ChatResult:
        await provider.bucket.acquire()
        stats = provider.stats
        async with provider.semaphore:
            refusal = admit() if admit is not None else None
            if refusal is not None:
                raise UpstreamTimeout(refusal, extra={"refused": True, "model": endpoint.model})
            if spend is not None and spend.reservation is None and self.meter is not None:
                # reserved when the call is about to be sent (a refused one costs nothing), once per call
                spend.reservation = await self.meter.reserve(spend.worst)
            stats.in_flight += 1
            stats.max_in_flight = max(stats.max_in_flight, stats.in_flight)
            stats.requests += 1
            started = time.perf_counter()
            timeout: Any = httpx.USE_CLIENT_DEFAULT
            if deadline is not None:
                left = max(0.001, deadline - time.monotonic())
                base = self._http.timeout
                timeout = httpx.Timeout(
                    connect=min(base.connect or left, left),
                    read=min(base.read or left, left),
                    write=min(base.write or left, left),
                    pool=min(base.pool or left, left),
                )
            base_read = self._http.timeout.read
            total = base_read if base_read is not None else 60.0
            if deadline is not None:
                total = min(total, max(0.001, deadline - time.monotonic()))
            try:
                response = await apost(
                    self._http,
                    url,
                    limit=self.max_response_bytes,
                    total_seconds=total,
                    content=payload,
                    headers=headers,
                    timeout=timeout,
                )
            except ResponseTooLarge as exc:
                raise UpstreamBadResponse(f"{endpoint.model}: {exc}", extra={"model": endpoint.model}) from exc
            except httpx.TimeoutException as exc:
                error: UpstreamError = UpstreamTimeout(
                    f"{endpoint.model}: {type(exc).__name__} after {time.perf_counter() - started:.2f}s"
                )
                raise _Retryable(error) from exc
            except httpx.TransportError as exc:
                raise _Retryable(UpstreamUnavailable(f"{endpoint.model}: {type(exc).__name__}: {exc}")) from exc
            except httpx.InvalidURL as exc:
                raise UpstreamUnavailable(f"invalid LLM base URL {endpoint.base_url!r}") from exc
            finally:
                stats.in_flight -= 1
            latency_ms = (time.perf_counter() - started) * 1000.0
        return self._interpret(response, endpoint, latency_ms, attempt)

    def _interpret(self, response: BoundedResponse, endpoint: Endpoint, latency_ms: float, attempt: int) -> ChatResult:
        status = response.status_code
        extra: dict[str, object] = {"status": status, "model": endpoint.model}
        if status == 429 or status == 503:
            retry_after = parse_retry_after(response.headers.get("retry-after"))
            if status == 429:
                raise _Retryable(
                    UpstreamRateLimited(f"{endpoint.model}: rate limited (429)", retry_after=retry_after, extra=extra),
                    retry_after,
                )
            raise _Retryable(UpstreamUnavailable(f"{endpoint.model}: HTTP 503", extra=extra), retry_after)
        if status >= 500:
            raise _Retryable(UpstreamUnavailable(f"{endpoint.model}: HTTP {status}", extra=extra))
        if status != 200:
            raise UpstreamBadResponse(f"{endpoint.model}: HTTP {status}: {response.text[:200]}", extra=extra)
        try:
            completion = _COMPLETION_DECODER.decode(response.content)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise UpstreamBadResponse(f"{endpoint.model}: not a chat completion: {exc}", extra=extra) from exc
        if not completion.choices:
            raise UpstreamBadResponse(f"{endpoint.model}: chat completion without choices", extra=extra)
        choice = completion.choices[0]
        usage = completion.usage or _Usage()
        return ChatResult(
            text=choice.message.content,
            finish_reason=choice.finish_reason,
            model=completion.model or endpoint.model,
            usage=Usage(prompt_tokens=usage.prompt_tokens or 0, completion_tokens=usage.completion_tokens or 0),
            latency_ms=latency_ms,
            attempts=attempt,
        )
