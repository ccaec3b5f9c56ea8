"""Lanes and fair shares (``service.state.lanes``), through the real API and a real worker on the test Redis: the order
in which jobs run is read from ARQ's own job results (their start times), one job at a time."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from arq import create_pool
from arq.connections import RedisSettings
from arq.jobs import Job
from redis.asyncio import Redis

from service.platform.settings import Settings
from service.state import lanes
from service.state.store import Store
from tests.conftest import TEST_REDIS_URL, issue_test_key
from tests.worker_support import run_worker_burst

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(45)

SOURCE = "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā, Pahīnabhayabheravā."
GOOD = [
    "Endowed with the seven treasures, trained in the three trainings, the great heroes wander, fearless.",
    "Possessed of the seven gems, trained in the three trainings, great heroes roam about, fear abandoned.",
]
TENANT_B = "lanes-test-b"


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "source": {"text": SOURCE, "lang": "pli", "ref": "sn22.76:7"},
        "candidates": [{"id": f"c{i}", "text": t, "model": f"vendor/m{i}"} for i, t in enumerate(GOOD)],
        "checks": ["peer_distance", "hard_flags", "length_ratio"],
        **extra,
    }


@pytest.fixture()
def as_b(settings: Settings) -> Iterator[dict[str, str]]:
    """Requests as a second tenant."""
    yield {"Authorization": f"Bearer {issue_test_key(settings, tenant=TENANT_B)}"}
    r = redis.Redis.from_url(TEST_REDIS_URL)
    for key in r.scan_iter(match=f"trisk:t:{TENANT_B}:*", count=1000):
        r.delete(key)


def _pool(settings: Settings) -> Any:
    return create_pool(RedisSettings.from_dsn(settings.redis.url), default_queue_name=settings.redis.queue_name)


def _started(settings: Settings, job_ids: list[str]) -> dict[str, float]:
    """When each job started (ARQ's result records), by job id."""

    async def go() -> dict[str, float]:
        pool = await _pool(settings)
        try:
            out = {}
            for jid in job_ids:
                info = await Job(jid, pool).result_info()
                assert info is not None and info.success, f"job {jid} has no successful result"
                out[jid] = info.start_time.timestamp()
            return out
        finally:
            await pool.aclose()

    return asyncio.run(go())


def _order(settings: Settings, aids: list[str]) -> list[str]:
    """The assessments by the start of their cheap-tier job."""
    started = _started(settings, [f"{a}:cheap" for a in aids])
    return sorted(aids, key=lambda a: started[f"{a}:cheap"])


def test_a_single_assessment_runs_before_a_batch_queued_earlier(client: Any, settings: Settings) -> None:
    # the same tenant, so only the lane can put the single first
    batch = client.post("/v1/batches", json={"items": [_body() for _ in range(8)]}).json()
    single = client.post("/v1/assessments", json=_body()).json()["id"]
    assert run_worker_burst(settings, max_jobs=1).jobs_failed == 0
    items = client.get(f"/v1/batches/{batch['id']}/results").text.strip().splitlines()
    assert len(items) == 8 and client.get(f"/v1/batches/{batch['id']}").json()["status"] == "done"
    assert client.get(f"/v1/assessments/{single}").json()["status"] == "done"
    order = _order(settings, [single, *batch["assessment_ids"]])
    assert order[0] == single


def test_a_flood_from_one_tenant_does_not_starve_another(client: Any, settings: Settings, as_b: dict[str, str]) -> None:
    flood = [client.post("/v1/assessments", json=_body()).json()["id"] for _ in range(50)]
    other = client.post("/v1/assessments", json=_body(), headers=as_b).json()["id"]
    assert run_worker_burst(settings, max_jobs=1).jobs_failed == 0
    order = _order(settings, [other, *flood])
    assert order.index(other) <= 1  # level with the flood's first job, ahead of the other 49


def test_a_tenant_idle_meanwhile_gets_its_share_not_a_credit(
    client: Any, settings: Settings, as_b: dict[str, str]
) -> None:
    """B joins after about 20 of A's 40 jobs ran: B's 20 alternate with A's remaining ones (the lane's virtual time
    moved on with A's work), rather than all running first as if B were owed the time it was idle."""
    flood = [client.post("/v1/assessments", json=_body()).json()["id"] for _ in range(40)]
    # ARQ's burst limit can stop a job short (it is then run again): about 20 ran
    assert run_worker_burst(settings, max_jobs=1, max_burst_jobs=20).jobs_complete >= 15
    late = [client.post("/v1/assessments", json=_body(), headers=as_b).json()["id"] for _ in range(20)]
    assert run_worker_burst(settings, max_jobs=1).jobs_failed == 0
    order = _order(settings, flood + late)[20:]
    first_half = order[:20]
    assert 7 <= sum(a in late for a in first_half) <= 13, [a in late for a in order]


def test_follow_on_jobs_keep_the_lane_of_their_assessment(client: Any, settings: Settings) -> None:
    url = "http://127.0.0.1:9/never-called"  # the callback jobs are queued, not run
    r = redis.Redis.from_url(TEST_REDIS_URL)
    queue = settings.redis.queue_name
    batch = client.post("/v1/batches", json={"items": [_body(callback_url=url)]}).json()["assessment_ids"][0]
    assert lanes.lane_of_score(r.zscore(queue, f"{batch}:cheap")) == "bulk"
    assert run_worker_burst(settings, max_jobs=1, max_burst_jobs=1).jobs_complete == 1
    single = client.post("/v1/assessments", json=_body(callback_url=url)).json()["id"]
    assert lanes.lane_of_score(r.zscore(queue, f"{single}:cheap")) == "interactive"
    # the single's cheap job runs before the batch item's callback, queued earlier in the bulk lane
    assert run_worker_burst(settings, max_jobs=1, max_burst_jobs=1).jobs_complete == 1
    assert client.get(f"/v1/assessments/{single}").json()["status"] == "done"
    assert lanes.lane_of_score(r.zscore(queue, f"{single}:callback")) == "interactive"
    assert lanes.lane_of_score(r.zscore(queue, f"{batch}:callback")) == "bulk"


def test_a_job_scored_in_the_past_is_kept_until_it_runs(settings: Settings) -> None:
    """ARQ's own expiry would be ``score - now + a day``, negative for a lane's score: the job would vanish. The one
    given instead is a day, not the 1,000 days that milliseconds read as ARQ's seconds would keep a job key."""

    job_id = f"{uuid.uuid4().hex}:cheap"

    async def go() -> tuple[int, float]:
        pool = await _pool(settings)
        try:
            await lanes.enqueue(pool, "assess_cheap", "t", "no-such-assessment", job_id=job_id, lane="bulk")
            return await pool.pttl(f"arq:job:{job_id}"), await pool.zscore(settings.redis.queue_name, job_id)
        finally:
            await pool.aclose()

    ttl, score = asyncio.run(go())
    assert 23 * 3600 * 1000 < ttl <= 24 * 3600 * 1000, ttl
    assert lanes.lane_of_score(score) == "bulk"
    worker = run_worker_burst(settings, max_jobs=1)
    assert worker.jobs_complete == 1 and worker.jobs_failed == 0  # it ran (and found no assessment), not "expired"


class FailsOnce(Store):
    """A Redis blip on the first start of one assessment: its job raises ``Retry`` and ARQ defers it."""

    def __init__(self, aid: str) -> None:
        super().__init__(Redis.from_url(TEST_REDIS_URL), retention_seconds=600)
        self.aid, self.failed = aid, False

    async def mark_started(self, tenant: str, aid: str) -> None:
        if aid == self.aid and not self.failed:
            self.failed = True
            raise ConnectionError("injected blip")
        await super().mark_started(tenant, aid)


def test_a_retried_interactive_job_rejoins_its_lane_ahead_of_bulk(client: Any, settings: Settings) -> None:
    single = client.post("/v1/assessments", json=_body()).json()["id"]
    batch = client.post("/v1/batches", json={"items": [_body() for _ in range(12)]}).json()["assessment_ids"]
    worker = run_worker_burst(settings, max_jobs=1, ctx={"store": FailsOnce(single), "retry_delay": lambda tries: 0.2})
    assert worker.jobs_retried == 1 and worker.jobs_failed == 0
    started = _started(settings, [f"{a}:cheap" for a in [single, *batch]])
    after = sum(started[f"{a}:cheap"] > started[f"{single}:cheap"] for a in batch)
    # without the hooks the retry (at ARQ's "now + 0.2 s") would run after every bulk job
    assert after >= 6, after


async def test_jobs_are_queued_in_one_round_trip_once_each() -> None:
    """One script call queues a tenant's jobs (what a submission waits for); an id already queued, or one whose job
    has a result, is not queued again (ARQ's dedup), and its reserved start is not taken twice for the queued ones."""

    class Counting:
        default_queue_name = f"trisk:test:{uuid.uuid4().hex[:8]}:queue"
        job_serializer = None

        def __init__(self) -> None:
            self.redis = Redis.from_url(TEST_REDIS_URL)
            self.calls = 0

        async def eval(self, *args: Any) -> Any:
            self.calls += 1
            return await self.redis.eval(*args)

    pool = Counting()
    queue = pool.default_queue_name
    ids = [f"{uuid.uuid4().hex}:cheap" for _ in range(3)]
    try:
        jobs = [(("a",), job_id, 2) for job_id in ids]
        assert await lanes.enqueue_many(pool, "assess_cheap", "t", jobs, lane="bulk") == 3
        assert pool.calls == 1
        scores = [await pool.redis.zscore(queue, job_id) for job_id in ids]
        assert [s - scores[0] for s in scores] == [0, 2, 4]  # consecutive starts at the jobs' costs
        assert all(lanes.lane_of_score(s) == "bulk" for s in scores)
        await pool.redis.set(f"arq:result:{ids[2]}", b"done")
        await pool.redis.delete(f"arq:job:{ids[2]}")
        await pool.redis.zrem(queue, ids[2])
        assert await lanes.enqueue_many(pool, "assess_cheap", "t", jobs, lane="bulk") == 0
        assert await pool.redis.zscore(queue, ids[2]) is None and await pool.redis.zcard(queue) == 2
        assert [await pool.redis.zscore(queue, job_id) for job_id in ids[:2]] == scores[:2]
    finally:
        await pool.redis.delete(queue, f"{queue}:lane:bulk", *[f"arq:job:{i}" for i in ids], f"arq:result:{ids[2]}")
        await pool.redis.aclose()
