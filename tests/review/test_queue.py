"""The review queue on real Redis: budget order, flagged scope, filters, atomic claims, expiry, renew, release."""

from __future__ import annotations

import asyncio

import pytest
from redis.asyncio import Redis

from service.core.errors import Conflict, InputError, NotFound
from service.core.review import ReviewQueue, enqueue_for_review
from service.core.types import Flag, SignalValue
from tests.review.support import REDIS_URL, iid, write_assessment

CANDS = [
    {"id": "a", "model": "m1", "pct": 50.0, "signals": {"s": 0.1}},
    {"id": "b", "model": "m2", "pct": 96.0, "signals": {"s": 2.0}},
    {
        "id": "c",
        "model": "m1",
        "pct": 10.0,
        "forced": True,
        "signals": {"s": -1.0},
        "flags": [Flag(rule="source_copy", severity="critical", detail="copy")],
    },
    {"id": "d", "model": "m2", "pct": 85.0, "signals": {"s": 1.0}},
    {
        "id": "e",
        "model": "m3",
        "pct": 30.0,
        "signals": {"s": 0.0},
        "flags": [Flag(rule="number_mismatch", severity="minor", detail="3 vs 4")],
    },
]


async def test_budget_order_flagged_scope_and_filters(redis: Redis, tenant: str) -> None:
    st = await write_assessment(redis, tenant, CANDS, ref="mn1:1", batch_id="b1")
    q = ReviewQueue(redis)
    rows, total = await q.list(tenant, filters={}, flagged_only=True, status="pending", offset=0, limit=50)
    # forced first, then percentile desc; "a" (rest tier, no flag) is not flagged
    assert [r[0].candidate_id for r in rows] == ["c", "b", "d", "e"] and total == 4
    rows, total = await q.list(tenant, filters={}, flagged_only=False, status="any", offset=0, limit=50)
    assert [r[0].candidate_id for r in rows] == ["c", "b", "d", "a", "e"] and total == 5
    rows, _ = await q.list(tenant, filters={"model": "m2"}, flagged_only=False, status="any", offset=0, limit=50)
    assert [r[0].candidate_id for r in rows] == ["b", "d"]
    rows, _ = await q.list(
        tenant,
        filters={"tier": "top_5", "batch_id": "b1", "lang": "pli"},
        flagged_only=True,
        status="any",
        offset=0,
        limit=50,
    )
    assert [r[0].candidate_id for r in rows] == ["b"]
    page, total = await q.list(tenant, filters={}, flagged_only=False, status="any", offset=1, limit=2)
    assert [r[0].candidate_id for r in page] == ["b", "d"] and total == 5
    # the worker hook is idempotent
    assert await enqueue_for_review(redis, tenant, st) == 0
    item = await q.item(tenant, iid(st, "b"))
    assert item.tenant == tenant and item.passage == "mn1:1" and item.snapshot.signals["s"] == SignalValue(2.0)


async def test_queue_order_is_the_one_ranking_across_assessments(redis: Redis, tenant: str) -> None:
    """The queue sorts by risk.priority: forced by severity, then by score, whatever the budget percentile says (two
    assessments ranked against different pools can have percentiles in the other order)."""
    await write_assessment(redis, tenant, [{"id": "high", "pct": 90.0, "score": 2.0, "signals": {"s": 2.0}}])
    await write_assessment(redis, tenant, [{"id": "low", "pct": 95.0, "score": 1.0, "signals": {"s": 1.0}}])
    await write_assessment(
        redis,
        tenant,
        [
            {"id": "major", "pct": 1.0, "score": 5.0, "forced": True, "signals": {"s": 5.0}},
            {"id": "critical", "pct": 1.0, "score": -3.0, "forced": True, "severity": "critical", "signals": {}},
        ],
    )
    rows, _ = await ReviewQueue(redis).list(tenant, filters={}, flagged_only=False, status="any", offset=0, limit=9)
    assert [r[0].candidate_id for r in rows] == ["critical", "major", "high", "low"]
    assert [round(r[0].priority, 4) for r in rows] == [4.1024, 3.9372, 0.8524, 0.75]


async def test_two_claimants_race_for_one_item(redis: Redis, tenant: str) -> None:
    other = Redis.from_url(REDIS_URL)
    try:
        for round_ in range(10):
            await write_assessment(redis, tenant, [{"id": f"x{round_}", "pct": 99.5, "signals": {"s": 1.0}}])
            qa, qb = ReviewQueue(redis), ReviewQueue(other)
            la, lb = await asyncio.gather(qa.claim(tenant, "alice", 1, 30), qb.claim(tenant, "bob", 1, 30))
            assert len(la.items) + len(lb.items) == 1, (la, lb)
    finally:
        await other.aclose()


async def test_many_claimants_never_share_items(redis: Redis, tenant: str) -> None:
    cands = [{"id": f"c{i}", "pct": 80.0 + i, "signals": {"s": 0.0}} for i in range(12)]
    await write_assessment(redis, tenant, cands)
    q = ReviewQueue(redis)
    leases = await asyncio.gather(*(q.claim(tenant, f"r{i}", 3, 30) for i in range(6)))
    got = [i for lease in leases for i in lease.items]
    assert len(got) == len(set(got)) == 12


async def test_lease_expiry_returns_item(redis: Redis, tenant: str) -> None:
    await write_assessment(redis, tenant, [{"id": "only", "pct": 99.0, "signals": {"s": 1.0}}])
    q = ReviewQueue(redis)
    first = await q.claim(tenant, "alice", 1, 0.3)
    assert len(first.items) == 1
    assert (await q.claim(tenant, "bob", 1, 30)).items == []
    await asyncio.sleep(0.45)
    second = await q.claim(tenant, "bob", 1, 30)
    assert second.items == first.items
    with pytest.raises(NotFound):
        await q.renew(tenant, first.id, "alice", 30)


async def test_renew_and_release(redis: Redis, tenant: str) -> None:
    await write_assessment(redis, tenant, [{"id": "r1", "pct": 99.0, "signals": {"s": 1.0}}])
    q = ReviewQueue(redis)
    lease = await q.claim(tenant, "alice", 5, 0.4)
    with pytest.raises(Conflict):
        await q.renew(tenant, lease.id, "bob", 30)
    renewed = await q.renew(tenant, lease.id, "alice", 30)
    assert renewed.expires_at > lease.expires_at
    await asyncio.sleep(0.5)  # past the original expiry: the renewal holds
    assert (await q.claim(tenant, "bob", 1, 30)).items == []
    assert await q.release(tenant, lease.id) == 1
    assert (await q.claim(tenant, "bob", 1, 30)).items == lease.items
    with pytest.raises(NotFound):
        await q.release(tenant, lease.id)


async def test_reviewed_item_is_not_requeued(redis: Redis, tenant: str) -> None:
    st = await write_assessment(redis, tenant, [{"id": "v", "pct": 99.0, "signals": {"s": 1.0}}])
    q = ReviewQueue(redis)
    lease = await q.claim(tenant, "alice", 1, 0.2)
    await q.mark_reviewed(tenant, iid(st, "v"))
    await asyncio.sleep(0.3)
    assert (await q.claim(tenant, "bob", 1, 30)).items == []
    rows, _ = await q.list(tenant, filters={}, flagged_only=True, status="reviewed", offset=0, limit=10)
    assert [r[0].id for r in rows] == lease.items and rows[0][2] == 1


async def test_bad_claims(redis: Redis, tenant: str) -> None:
    q = ReviewQueue(redis)
    with pytest.raises(InputError):
        await q.claim(tenant, "alice", 0, 30)
    with pytest.raises(InputError):
        await q.claim(tenant, "alice", 1, 0)
