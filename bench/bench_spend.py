"""Tokens a tenant spends against its daily budget when its judge calls run concurrently.

Against the scripted OpenAI-protocol server (tests/fakes/openai_server.py, loopback) whose answers use every token
the request allows (a costly provider, the worst case), ``--calls`` concurrent chat calls of ``--max-tokens`` each
are made by the real client, metered against a budget of ``--budget`` tokens for a fresh tenant in Redis (db 15 of
the local Redis, keys removed afterwards). Printed: calls answered and refused before sending, tokens the provider
reported, the tenant's counter, and the budget.

    .venv/bin/python bench/bench_spend.py [--calls 8] [--budget 1000] [--max-tokens 200]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from pathlib import Path

import redis.asyncio as aioredis

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.core.judges.llm import ChatMessage, Endpoint, LLMClient, RetryPolicy  # noqa: E402
from service.platform.ratelimit import SpendExhausted, SpendMeter  # noqa: E402
from tests.fakes.openai_server import FakeOpenAIServer, Reply  # noqa: E402


async def run(args: argparse.Namespace, server: FakeOpenAIServer) -> None:
    redis = aioredis.Redis.from_url(args.redis_url)
    tenant = f"bench-spend-{uuid.uuid4().hex[:8]}"
    server.script("spender", [Reply("90", uses_max_tokens=True, delay=0.2)])
    meter = SpendMeter(redis, tenant, calls_per_day=0, tokens_per_day=args.budget)
    client = LLMClient(max_concurrency=args.calls, requests_per_second=0.0, retry=RetryPolicy(max_retries=0))
    try:
        metered = client.metered(meter)
        outcomes = await asyncio.gather(
            *(
                metered.chat(
                    Endpoint(server.base_url, "", "spender"),
                    [ChatMessage("user", f"Score this translation, item {i}.")],
                    temperature=0.0,
                    prompt_version="bench/1",
                    max_tokens=args.max_tokens,
                )
                for i in range(args.calls)
            ),
            return_exceptions=True,
        )
        answered = [o for o in outcomes if not isinstance(o, BaseException)]
        refused = sum(isinstance(o, SpendExhausted) for o in outcomes)
        spent = sum(r.usage.prompt_tokens + r.usage.completion_tokens for r in answered)
        _, counted = await meter.used()
        print(f"{args.calls} concurrent calls of max_tokens {args.max_tokens}, budget {args.budget} tokens:")
        print(
            f"  answered {len(answered)}, refused before sending {refused}, requests the provider saw "
            f"{len(server.requests_for('spender'))}"
        )
        print(f"  tokens the provider reported {spent}; the tenant's counter {counted}; budget {args.budget}")
    finally:
        await client.aclose()
        keys = [k async for k in redis.scan_iter(match=f"trisk:t:{tenant}:*")]
        if keys:
            await redis.delete(*keys)
        await redis.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=8)
    parser.add_argument("--budget", type=int, default=1000)
    parser.add_argument("--max-tokens", type=int, default=200)
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/15")
    args = parser.parse_args()
    with FakeOpenAIServer() as server:
        asyncio.run(run(args, server))


if __name__ == "__main__":
    main()
