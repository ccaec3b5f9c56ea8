"""What a provider or a tenant can make one LLM call cost: bytes read, time, tokens (reserved before the call, so
concurrent calls cannot take a tenant past its day's budget), and whose cache an answer comes from."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator

import httpx
import pytest
import redis.asyncio as aioredis

from service.core.judges.llm import ChatMessage, Endpoint, ResponseCache, RetryPolicy
from service.platform.errors import UpstreamBadResponse, UpstreamTimeout
from service.platform.ratelimit import SpendExhausted, SpendMeter
from tests.fakes.openai_server import FakeOpenAIServer, Reply

from .support import REDIS_TEST_URL, make_client

MESSAGES = [ChatMessage("system", "be brief"), ChatMessage("user", "Score this: 1")]
NO_RETRY = RetryPolicy(max_retries=0)


def ep(server: FakeOpenAIServer, model: str) -> Endpoint:
    return Endpoint(base_url=server.base_url, api_key="sk-test", model=model)


@contextlib.asynccontextmanager
async def _test_redis() -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(REDIS_TEST_URL)
    try:
        yield client
    finally:
        await client.aclose()


def _tenant() -> str:
    return f"test-bounds-{uuid.uuid4().hex[:10]}"


async def _forget(redis: aioredis.Redis, pattern: str) -> None:
    keys = [k async for k in redis.scan_iter(match=pattern)]
    if keys:
        await redis.delete(*keys)


async def test_an_answer_that_streams_without_end_is_cut_at_the_cap(fake: FakeOpenAIServer) -> None:
    fake.script("streamer", [Reply(stream_bytes=64 << 20)])  # 64 MiB, when the cap is 256 KiB
    async with make_client(retry=NO_RETRY, max_response_bytes=256 << 10) as client:
        started = time.monotonic()
        with pytest.raises(UpstreamBadResponse, match=r"answer over 262144 bytes"):
            await client.chat(ep(fake, "streamer"), MESSAGES, temperature=0.0, prompt_version="t/1")
    assert time.monotonic() - started < 5.0  # stopped reading, did not take the 64 MiB in


async def test_an_answer_that_drips_ends_at_one_total_deadline(fake: FakeOpenAIServer) -> None:
    # each byte comes 50 ms after the last: a read timeout of 0.5 s never trips; the whole answer would take ~20 s
    fake.script("dripper", [Reply("90", drip_seconds=0.05)])
    timeout = httpx.Timeout(connect=1.0, read=0.5, write=1.0, pool=1.0)
    async with make_client(retry=NO_RETRY, timeout=timeout) as client:
        started = time.monotonic()
        with pytest.raises(UpstreamTimeout):
            await client.chat(ep(fake, "dripper"), MESSAGES, temperature=0.0, prompt_version="t/1")
        elapsed = time.monotonic() - started
    assert elapsed < 1.5  # the read timeout, taken as the deadline of the whole attempt


async def test_max_tokens_is_capped_whoever_asks(fake: FakeOpenAIServer) -> None:
    async with make_client(max_tokens_cap=64) as client:
        await client.chat(ep(fake, "score-1"), MESSAGES, temperature=0.0, prompt_version="t/1", max_tokens=10**9)
        await client.chat(ep(fake, "score-2"), MESSAGES, temperature=0.0, prompt_version="t/1")
        await client.chat(ep(fake, "score-3"), MESSAGES, temperature=0.0, prompt_version="t/1", max_tokens=8)
    assert [r.max_tokens for r in fake.requests] == [64, 64, 8]  # an unsized call gets the cap, not "unbounded"


def test_the_prompt_bound_is_never_below_the_bytes() -> None:
    from service.core.judges.llm._client import prompt_token_bound

    pali = [ChatMessage("user", "Evaṃ me sutaṃ. " * 20)]
    assert prompt_token_bound(pali) >= len(pali[0].content.encode()) + 8


async def test_eight_concurrent_calls_cannot_overshoot_the_token_budget(fake: FakeOpenAIServer) -> None:
    """The finding: with 1,000 tokens a day, 8 concurrent calls each checked only "is anything left?" and all went
    out. Now each reserves its worst case first (prompt bound + max_tokens), atomically in Redis."""
    async with _test_redis() as redis:
        await _overshoot(fake, redis)


async def _overshoot(fake: FakeOpenAIServer, redis: aioredis.Redis) -> None:
    tenant = _tenant()
    fake.script("spender", [Reply("90", uses_max_tokens=True, delay=0.2)])  # every call takes all it may
    meter = SpendMeter(redis, tenant, calls_per_day=0, tokens_per_day=1000)
    try:
        async with make_client(retry=NO_RETRY) as base:
            client = base.metered(meter)
            outcomes = await asyncio.gather(
                *(
                    client.chat(
                        ep(fake, "spender"),
                        [ChatMessage("user", f"Score this: {i}")],
                        temperature=0.0,
                        prompt_version="t/1",
                        max_tokens=200,
                    )
                    for i in range(8)
                ),
                return_exceptions=True,
            )
        answered = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = [o for o in outcomes if isinstance(o, SpendExhausted)]
        assert len(answered) + len(refused) == 8 and refused and answered
        spent = sum(r.usage.prompt_tokens + r.usage.completion_tokens for r in answered)
        _, used = await meter.used()
        assert used == spent <= 1000  # settled to the real usage, under the budget
        assert len(fake.requests_for("spender")) == len(answered)  # a refused call sent nothing
    finally:
        await _forget(redis, f"trisk:t:{tenant}:*")


async def test_a_call_without_an_answer_releases_its_reservation(fake: FakeOpenAIServer) -> None:
    async with _test_redis() as redis:
        await _released(fake, redis)


async def _released(fake: FakeOpenAIServer, redis: aioredis.Redis) -> None:
    tenant = _tenant()
    meter = SpendMeter(redis, tenant, calls_per_day=0, tokens_per_day=1000)
    try:
        async with make_client(retry=NO_RETRY) as base:
            with pytest.raises(UpstreamBadResponse):
                await base.metered(meter).chat(
                    ep(fake, "no-such-model"), MESSAGES, temperature=0.0, prompt_version="t/1", max_tokens=500
                )
        assert await meter.used() == (1, 0)  # the call was sent (and counts); its reserved tokens are released
    finally:
        await _forget(redis, f"trisk:t:{tenant}:*")


async def test_one_tenant_never_gets_anothers_cached_answer(fake: FakeOpenAIServer) -> None:
    """The finding: B submitting A's exact texts got A's answers at no cost, with cache hits showing; so B learnt that
    someone had sent them. Answers are cached per tenant."""
    async with _test_redis() as redis:
        await _per_tenant(fake, redis)


async def _per_tenant(fake: FakeOpenAIServer, redis: aioredis.Redis) -> None:
    prefix = f"trisk:test:llm:{uuid.uuid4().hex}:"
    a, b = _tenant(), _tenant()
    try:
        async with make_client(cache=ResponseCache(redis, prefix=prefix, ttl_seconds=60)) as base:
            results = []
            for tenant in (a, b, a):
                meter = SpendMeter(redis, tenant, calls_per_day=0, tokens_per_day=0)
                results.append(
                    await base.metered(meter).chat(ep(fake, "score-66"), MESSAGES, temperature=0.0, prompt_version="t")
                )
        assert [r.cached for r in results] == [False, False, True]  # B paid for its own call; A's second was a hit
        assert len(fake.requests_for("score-66")) == 2
    finally:
        await _forget(redis, prefix + "*")
        for tenant in (a, b):
            await _forget(redis, f"trisk:t:{tenant}:*")
