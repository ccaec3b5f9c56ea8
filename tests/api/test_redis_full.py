"""A full Redis under the service: a private redis-server (AOF, noeviction) whose maxmemory is reached while the same
app instance (and a real worker process) keeps running. Submissions answer 503 problem+json with Retry-After, never
500; reads and the rate limiter carry on; readiness says how full Redis is; the worker waits (no crash loop, its
health record alive) and carries on by itself once Redis takes writes again."""

from __future__ import annotations

import socket
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from litestar.testing import TestClient

from service.app import create_app
from service.app.resources import Resources
from service.core.novelty import NoveltyIndex
from service.platform.settings import Settings
from tests.api.test_assessments import GOOD, _assessment
from tests.api.test_redis_restarts import (
    assert_redis_503,
    call,
    on_server,
    review_items,
    start_worker,
    wait_done,
)
from tests.conftest import issue_test_key, keyed
from tests.support.local_redis import RedisServer
from tests.worker_support import run_worker_burst

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(35)

FILLER = "filler:"
LIMIT = "6mb"


def fill(client: redis.Redis) -> None:
    """Write until Redis refuses (OOM), a few large values so the AOF's fsyncs stay few; then the limit is put well
    below what is used, since Redis counts a command's own bytes while it reads it and frees client buffers later (a
    small write would pass where a large one did not): from then on every write is refused, however small, as in a
    Redis filled with assessments."""
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        for n in range(10_000):
            client.set(f"{FILLER}{n}", b"x" * (256 << 10))
    client.config_set("maxmemory", int(client.info("memory")["used_memory"]) // 2)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        client.set("probe", "1")


def drain(client: redis.Redis) -> None:
    """An operator frees memory (DEL is allowed on a full Redis) and puts the limit back."""
    keys = list(client.scan_iter(match=f"{FILLER}*", count=1000))
    if keys:
        client.delete(*keys)
    client.config_set("maxmemory", LIMIT)


@pytest.fixture()
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    server = RedisServer(tmp_path / "redis", extra=("--maxmemory", LIMIT))
    server.start()
    yield server
    server.kill()


@pytest.fixture()
def settings(test_settings: Settings, redis_server: RedisServer) -> Settings:
    # the rate limits on: their counters are written on every request, also when Redis is full
    s = on_server(test_settings, redis_server)
    return replace(s, api=replace(s.api, rate_per_key=600, rate_per_tenant=1200))


@pytest.fixture()
def api(sn12_index: NoveltyIndex, settings: Settings) -> Iterator[Any]:
    app = create_app(settings, resources=Resources(settings=settings, indexes={"pli": sn12_index}))
    with TestClient(app=app) as tc:
        yield keyed(tc, issue_test_key(settings))


def assert_full_503(r: Any) -> None:
    """The 503 of a Redis away, saying it is full, with the longer Retry-After of a full Redis."""
    assert_redis_503(r)
    assert "full" in r.json()["detail"] and int(r.headers["retry-after"]) >= 10, (r.headers, r.text)


def test_a_full_redis_is_a_503_reads_go_on_and_the_same_app_recovers(
    api: Any, redis_server: RedisServer, settings: Settings
) -> None:
    first = api.post("/v1/assessments", json=_assessment(GOOD))
    assert first.status_code == 202, first.text
    aid = first.json()["id"]
    run_worker_burst(settings)
    assert api.get(f"/v1/assessments/{aid}").json()["status"] == "done"
    item = next(iter(review_items(api, aid)))
    ready = api.get("/health/ready")
    assert ready.status_code == 200 and ready.json()["checks"]["redis_memory"]["ok"] is True, ready.text

    client = redis_server.client()
    fill(client)
    assert_full_503(api.post("/v1/assessments", json=_assessment(GOOD)))
    assert_full_503(api.post("/v1/assessments", json=_assessment(GOOD), headers={"Idempotency-Key": "full-1"}))
    assert_full_503(api.post("/v1/batches", json={"items": [_assessment(GOOD[:2])]}))
    # reads need no write: the rate limiter counts them (allow-oom) instead of failing them
    got = api.get(f"/v1/assessments/{aid}")
    assert got.status_code == 200 and got.json()["status"] == "done", got.text
    assert "ratelimit" in {k.lower() for k in got.headers}, got.headers
    assert api.get("/v1/review/queue").status_code == 200
    # a verdict and the review queue are rows of the durable store: recorded while Redis is full
    verdict = api.post(f"/v1/review/items/{item}/verdict", json={"label": "VALID"})
    assert verdict.status_code == 201, verdict.text

    ready = api.get("/health/ready")
    assert ready.status_code == 503, ready.text
    memory = ready.json()["checks"]["redis_memory"]
    assert memory["ok"] is False and "of maxmemory" in memory["detail"] and "%)" in memory["detail"], memory
    assert "redis://" not in ready.text and "127.0.0.1" not in memory["detail"]

    drain(client)
    assert api.get("/health/ready").status_code == 200
    again = api.post("/v1/assessments", json=_assessment(GOOD))
    assert again.status_code == 202, again.text


def test_no_route_answers_500_while_redis_is_full(api: Any, redis_server: RedisServer) -> None:
    """Every route of the OpenAPI document, with placeholder ids and an empty body: a 4xx, a 2xx or a 503, never a
    500."""
    schema = api.get("/schema/openapi.json").json()
    fill(redis_server.client())
    seen: Counter[int] = Counter()
    for path, ops in schema["paths"].items():
        concrete = path.replace("{", "").replace("}", "")
        for method in ops:
            r = call(api, method.upper(), concrete, {} if method in ("post", "put") else None)
            seen[r.status_code] += 1
            assert r.status_code < 500 or r.status_code == 503, (method, path, r.status_code, r.text)
    assert seen[200] >= 3, seen  # reads carried on


def test_a_worker_waits_out_a_full_redis_alive_and_carries_on(
    api: Any, redis_server: RedisServer, settings: Settings, tmp_path: Path
) -> None:
    log = tmp_path / "worker.log"
    worker = start_worker(settings, log)
    client = redis_server.client()
    health = f"{settings.redis.queue_name}:health-check:{socket.gethostname()}"
    try:
        aid = api.post("/v1/assessments", json=_assessment(GOOD)).json()["id"]
        wait_done(api, aid, worker, log)
        fill(client)
        # arq's health record is written every 10 s and lives 11 s: beyond two of its periods, the worker must be
        # alive and its record (the liveness probe's `arq --check`) present but for short gaps
        deadline, last_seen, longest_gap, values = time.monotonic() + 30, time.monotonic(), 0.0, set()
        while time.monotonic() < deadline:
            assert worker.poll() is None, f"the worker exited:\n{log.read_text(errors='replace')[-3000:]}"
            value = client.get(health)
            now = time.monotonic()
            if value is not None:
                values.add(value.decode())
                longest_gap, last_seen = max(longest_gap, now - last_seen), now
            time.sleep(0.25)
        longest_gap = max(longest_gap, time.monotonic() - last_seen)
        assert longest_gap < 6.0, f"the health record lapsed for {longest_gap:.1f} s: {values}"
        assert "waiting for Redis to take writes again" in values, values
        assert "waiting for Redis to take writes again" in log.read_text(errors="replace")

        drain(client)
        nxt = api.post("/v1/assessments", json=_assessment(GOOD))
        assert nxt.status_code == 202, nxt.text
        wait_done(api, nxt.json()["id"], worker, log)
    finally:
        worker.terminate()
        worker.wait(30)
