"""Worker heartbeats in Redis: a record per worker, refreshed, expiring with its TTL, deleted on exit; what the API
reads of them (/health/workers, /v1/workers)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from typing import Any

import msgspec
import pytest_asyncio
from litestar.testing import TestClient
from redis.asyncio import Redis

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings
from service.state import worker_registry as wr
from tests.conftest import TEST_REDIS_URL, issue_test_key, keyed


@pytest_asyncio.fixture(loop_scope="function")
async def redis() -> AsyncIterator[Redis]:
    client = Redis.from_url(TEST_REDIS_URL)
    yield client
    await client.aclose()


def _caps(signature: str | None = "sig-a", llm: bool = False) -> wr.Capabilities:
    return wr.Capabilities(
        judges=wr.JudgeConfig(
            llm_configured=llm, provider="https://***@llm.example/v1" if llm else None, panel="strong"
        ),
        index=wr.IndexState(signatures={"pli": signature} if signature else {}),
    )


async def test_a_heartbeat_is_published_refreshed_and_removed(redis: Redis) -> None:
    queue = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
    beat = wr.Heartbeat(redis, queue, "1.2.3", _caps())
    await beat.start()
    try:
        (record,) = await wr.live_workers(redis, queue)
        assert record.release == "1.2.3" and record.state == "running" and record.queue == queue
        assert record.capabilities.index.signatures == {"pli": "sig-a"}
        ttl = await redis.ttl(wr.record_key(queue, record.worker_id))
        assert 0 < ttl <= wr.RECORD_TTL_SECONDS
        first = record.last_seen
        await beat.beat()
        (again,) = await wr.live_workers(redis, queue)
        assert again.last_seen >= first
    finally:
        await beat.stop()
    assert await wr.live_workers(redis, queue) == []
    assert await redis.exists(wr.registry_key(queue)) == 0


async def test_an_expired_record_is_not_live_and_is_pruned(redis: Redis) -> None:
    queue = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
    beat = wr.Heartbeat(redis, queue, "1", _caps())
    await beat.beat()
    # the worker stops beating (killed): its record expires; an index entry older than the TTL is pruned
    await redis.delete(wr.record_key(queue, beat.record.worker_id))
    assert await wr.live_workers(redis, queue) == []
    assert await redis.zcard(wr.registry_key(queue)) == 0
    await beat.beat()
    later = time.time() + wr.RECORD_TTL_SECONDS + 1
    assert await wr.live_workers(redis, queue, now=later) == []
    await redis.delete(wr.record_key(queue, beat.record.worker_id))


async def test_a_newer_workers_record_is_read_by_an_older_api(redis: Redis) -> None:
    queue = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
    record = msgspec.to_builtins(wr.Heartbeat(redis, queue, "9", _caps()).record)
    record["capabilities"]["gpu"] = {"count": 1}  # a field of a later release
    record["last_seen"] = time.time()
    await redis.set(wr.record_key(queue, record["worker_id"]), msgspec.json.encode(record), ex=20)
    await redis.zadd(wr.registry_key(queue), {record["worker_id"]: record["last_seen"]})
    (read,) = await wr.live_workers(redis, queue)
    assert read.release == "9"
    await redis.delete(wr.record_key(queue, record["worker_id"]), wr.registry_key(queue))


def _app(settings: Settings, index: NoveltyIndex) -> Any:
    return create_app(settings, resources=Resources(settings=settings, indexes={"pli": index}))


async def test_health_workers_says_whether_live_workers_can_do_the_work(
    sn12_index: NoveltyIndex, test_settings: Settings, redis: Redis
) -> None:
    queue = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
    settings = replace(test_settings, redis=replace(test_settings.redis, queue_name=queue))
    token = issue_test_key(settings)
    with TestClient(app=_app(settings, sn12_index)) as tc:
        keyed(tc, token)
        none = tc.get("/health/workers")
        assert none.status_code == 503 and none.json()["status"] == "no_workers", none.text
        # readiness does not depend on workers (k8s/README.md says why)
        assert tc.get("/health/ready").status_code == 200
        same = wr.Heartbeat(redis, queue, "1", _caps(sn12_index.signature_id, llm=True))
        await same.beat()
        ok = tc.get("/health/workers")
        assert ok.status_code == 200, ok.text
        (summary,) = ok.json()["workers"]
        assert summary["same_index_as_api"] is True and summary["llm_configured"] is True
        assert "provider" not in summary, "the provider is for admins (/v1/workers)"
        detail = tc.get("/v1/workers").json()
        assert detail["workers"][0]["capabilities"]["judges"]["provider"] == "https://***@llm.example/v1"
        other = wr.Heartbeat(redis, queue, "2", _caps("another-index"))
        other.record.worker_id += "-b"
        await other.beat()
        bad = tc.get("/health/workers")
        assert bad.status_code == 503 and bad.json()["status"] == "degraded", bad.text
        problems = " ".join(bad.json()["problems"])
        assert "another-index" in problems and "2 releases" in problems
        # an anonymous caller sees the summary, never the detail; nor does another tenant's admin (operators only)
        other_admin = issue_test_key(settings, tenant=f"not-operator-{uuid.uuid4().hex[:6]}")
        assert tc.get("/v1/workers", headers={"Authorization": f"Bearer {other_admin}"}).status_code == 403
        tc.headers.pop("Authorization")
        assert tc.get("/v1/workers").status_code == 401
        await same.stop()
        await other.stop()
