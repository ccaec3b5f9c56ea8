"""The chat client: answers, retries and Retry-After, error translation, limits and the Redis cache."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
import pytest
import redis.asyncio as aioredis

from service.core.judges.llm import ChatMessage, Endpoint, ResponseCache, RetryPolicy, TokenBucket
from service.platform.errors import UpstreamBadResponse, UpstreamRateLimited, UpstreamTimeout, UpstreamUnavailable
from service.platform.settings import LLMSettings
from tests.fakes.openai_server import FakeOpenAIServer, Reply, closed_port_url

from .support import REDIS_TEST_URL, make_client

MESSAGES = [ChatMessage("system", "be brief"), ChatMessage("user", "Score this: 1")]


def ep(server: FakeOpenAIServer, model: str) -> Endpoint:
    return Endpoint(base_url=server.base_url, api_key="sk-test", model=model)


async def test_answer_text_usage_model_latency(fake: FakeOpenAIServer) -> None:
    async with make_client() as client:
        result = await client.chat(ep(fake, "score-87"), MESSAGES, temperature=0.0, prompt_version="t/1", max_tokens=8)
    assert result.text == "87"
    assert result.finish_reason == "stop"
    assert result.model == "score-87"
    assert result.usage.prompt_tokens > 0 and result.usage.completion_tokens == 1
    assert result.latency_ms > 0 and result.attempts == 1 and not result.cached
    (request,) = fake.requests
    assert request.path == "/v1/chat/completions"
    assert request.authorization == "Bearer sk-test"
    assert request.max_tokens == 8 and request.temperature == 0.0
    assert request.messages == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Score this: 1"}]


async def test_retries_5xx_then_succeeds(fake: FakeOpenAIServer) -> None:
    fake.script("flaky", [Reply(None, status=500), Reply(None, status=502), Reply("70")])
    async with make_client() as client:
        result = await client.chat(ep(fake, "flaky"), MESSAGES, temperature=0.0, prompt_version="t/1")
        assert client.stats(fake.base_url).retries == 2
    assert result.text == "70" and result.attempts == 3
    assert len(fake.requests) == 3


async def test_persistent_500_is_unavailable_after_retries(fake: FakeOpenAIServer) -> None:
    async with make_client() as client:
        with pytest.raises(UpstreamUnavailable) as info:
            await client.chat(ep(fake, "error-500"), MESSAGES, temperature=0.0, prompt_version="t/1")
    assert info.value.extra["attempts"] == 4  # 1 + max_retries(3)
    assert len(fake.requests) == 4


@pytest.mark.parametrize("retry_after", ["1", "0.4"])
async def test_429_retry_after_is_honoured(fake: FakeOpenAIServer, retry_after: str) -> None:
    fake.script("busy", [Reply(None, status=429, headers={"retry-after": retry_after}), Reply("64")])
    async with make_client() as client:
        result = await client.chat(ep(fake, "busy"), MESSAGES, temperature=0.0, prompt_version="t/1")
    assert result.text == "64"
    first, second = fake.requests
    waited = second.received_at - first.received_at
    # the backoff alone would be ~0.01 s; the server asked for retry_after seconds
    assert float(retry_after) <= waited < float(retry_after) + 1.0


async def test_retry_after_beyond_policy_fails_fast_with_retry_after(fake: FakeOpenAIServer) -> None:
    fake.script("closed", [Reply(None, status=429, headers={"retry-after": "120"})])
    async with make_client() as client:
        started = time.monotonic()
        with pytest.raises(UpstreamRateLimited) as info:
            await client.chat(ep(fake, "closed"), MESSAGES, temperature=0.0, prompt_version="t/1")
    assert time.monotonic() - started < 1.0
    assert info.value.retry_after == 120.0
    assert len(fake.requests) == 1


async def test_persistent_429_is_rate_limited(fake: FakeOpenAIServer) -> None:
    fake.script("busy", [Reply(None, status=429)])  # no Retry-After: exponential backoff
    async with make_client() as client:
        with pytest.raises(UpstreamRateLimited):
            await client.chat(ep(fake, "busy"), MESSAGES, temperature=0.0, prompt_version="t/1")
    assert len(fake.requests) == 4


async def test_judge_down_is_unavailable() -> None:
    endpoint = Endpoint(base_url=closed_port_url(), api_key="k", model="any")
    async with make_client() as client:
        with pytest.raises(UpstreamUnavailable) as info:
            await client.chat(endpoint, MESSAGES, temperature=0.0, prompt_version="t/1")
    assert isinstance(info.value.__cause__, httpx.ConnectError)
    assert info.value.extra["attempts"] == 4


async def test_slow_answer_times_out(fake: FakeOpenAIServer) -> None:
    timeout = httpx.Timeout(connect=1.0, read=0.15, write=1.0, pool=1.0)
    retry = RetryPolicy(max_retries=1, backoff_base=0.01, backoff_max=0.01)
    async with make_client(timeout=timeout, retry=retry) as client:
        with pytest.raises(UpstreamTimeout) as info:
            await client.chat(ep(fake, "slow-0.6"), MESSAGES, temperature=0.0, prompt_version="t/1")
    assert isinstance(info.value.__cause__, httpx.ReadTimeout)
    assert len(fake.requests) == 2


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (Reply(None, status=400), "HTTP 400"),
        (Reply(None, status=401), "HTTP 401"),
        (Reply(None, raw_body=b"<html>gateway</html>"), "not a chat completion"),
        (Reply(None, raw_body=b'{"choices": []}'), "without choices"),
    ],
)
async def test_bad_responses_are_not_retried(fake: FakeOpenAIServer, reply: Reply, message: str) -> None:
    fake.script("odd", [reply])
    async with make_client() as client:
        with pytest.raises(UpstreamBadResponse, match=message):
            await client.chat(ep(fake, "odd"), MESSAGES, temperature=0.0, prompt_version="t/1")
    assert len(fake.requests) == 1


async def test_concurrency_limit_is_never_exceeded(fake: FakeOpenAIServer) -> None:
    async with make_client(max_concurrency=3) as client:
        results = await asyncio.gather(
            *(
                client.chat(ep(fake, "slow-0.05"), [ChatMessage("user", str(i))], temperature=0, prompt_version="t/1")
                for i in range(30)
            )
        )
        stats = client.stats(fake.base_url)
    assert all(r.text == "75" for r in results)
    assert fake.max_in_flight_for("slow-0.05") == 3  # the server's own count
    assert stats.max_in_flight == 3 and stats.requests == 30


async def test_rate_limit_spaces_requests(fake: FakeOpenAIServer) -> None:
    async with make_client(requests_per_second=20.0, burst=1.0) as client:
        started = time.monotonic()
        await asyncio.gather(
            *(client.chat(ep(fake, "score-1"), MESSAGES, temperature=0, prompt_version="t/1") for _ in range(6))
        )
        elapsed = time.monotonic() - started
    assert elapsed >= 0.24  # 1 immediate + 5 more at 20/s


def test_token_bucket_reservations() -> None:
    bucket = TokenBucket(rate=10.0, burst=2.0)
    waits = [bucket.reserve() for _ in range(4)]
    assert waits[:2] == [0.0, 0.0]
    assert waits[2] == pytest.approx(0.1, abs=0.01) and waits[3] == pytest.approx(0.2, abs=0.01)
    assert TokenBucket(rate=0.0).reserve() == 0.0


async def test_cache_hit_makes_no_second_upstream_call(fake: FakeOpenAIServer) -> None:
    redis = aioredis.Redis.from_url(REDIS_TEST_URL)
    prefix = f"trisk:test:llm:{uuid.uuid4().hex}:"
    try:
        cache = ResponseCache(redis, prefix=prefix, ttl_seconds=60)
        async with make_client(cache=cache) as client:
            first = await client.chat(ep(fake, "score-77"), MESSAGES, temperature=0.0, prompt_version="t/1")
            second = await client.chat(ep(fake, "score-77"), MESSAGES, temperature=0.0, prompt_version="t/1")
            assert len(fake.requests) == 1
            assert not first.cached and second.cached and second.attempts == 0
            assert (second.text, second.usage, second.model) == (first.text, first.usage, first.model)
            # each part of the key matters: temperature, prompt version, model, prompt text
            await client.chat(ep(fake, "score-77"), MESSAGES, temperature=0.1, prompt_version="t/1")
            await client.chat(ep(fake, "score-77"), MESSAGES, temperature=0.0, prompt_version="t/2")
            await client.chat(ep(fake, "score-78"), MESSAGES, temperature=0.0, prompt_version="t/1")
            await client.chat(ep(fake, "score-77"), MESSAGES[:1], temperature=0.0, prompt_version="t/1")
            assert len(fake.requests) == 5
            assert client.stats(fake.base_url).cache_hits == 1
        keys = [k async for k in redis.scan_iter(match=prefix + "*")]
        assert len(keys) == 5
        assert 0 < await redis.ttl(keys[0]) <= 60
    finally:
        keys = [k async for k in redis.scan_iter(match=prefix + "*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


async def test_cache_outage_degrades_to_upstream_calls(fake: FakeOpenAIServer) -> None:
    dead = aioredis.Redis.from_url("redis://127.0.0.1:1/15", socket_connect_timeout=0.2)
    try:
        async with make_client(cache=ResponseCache(dead)) as client:
            result = await client.chat(ep(fake, "score-50"), MESSAGES, temperature=0.0, prompt_version="t/1")
        assert result.text == "50"
    finally:
        await dead.aclose()


async def test_from_settings_and_no_provider() -> None:
    settings = LLMSettings(base_url="", max_concurrency=2, requests_per_second=5.0, max_retries=1)
    async with make_client() as client:
        with pytest.raises(UpstreamUnavailable, match="no LLM provider configured"):
            await client.chat(Endpoint("", "", "m"), MESSAGES, temperature=0.0, prompt_version="t/1")
    from service.core.judges.llm import LLMClient

    async with LLMClient.from_settings(settings) as client:
        assert client.max_concurrency == 2 and client.retry.max_retries == 1


def test_backoff_is_exponential_with_bounded_jitter() -> None:
    policy = RetryPolicy(backoff_base=0.5, backoff_max=4.0, jitter=0.25)
    for retry, nominal in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (6, 4.0)]:
        delays = [policy.backoff(retry) for _ in range(200)]
        assert all(nominal * 0.75 <= d <= nominal * 1.25 for d in delays)
        assert len(set(delays)) > 1  # jittered
