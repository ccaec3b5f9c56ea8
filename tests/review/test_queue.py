"""The review queue in the durable store, on both engines: budget order, flagged scope, filters, claims two reviewers
cannot both win, expiry, renew, release, verdicts under the lease rules, retries, and items that end with their
assessment."""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time

import msgspec
import pytest
import sqlalchemy as sa
from redis.asyncio import Redis

from service.core.types import Flag, SignalValue
from service.platform.errors import Conflict, Forbidden, InputError, NotFound
from service.review import ReviewQueue, enqueue_for_review, queue_items
from service.state.durable import DurableStore, forget_items
from service.state.durable import review_items as rows_module
from service.state.durable.schema import assessments, review_items
from service.state.store import Store
from tests.review.support import iid, write_assessment
from workers.reconcile import purge_once

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


async def one(redis: Redis, db: DurableStore, tenant: str, cid: str = "only", pct: float = 99.0) -> str:
    """One flagged item; returns its id."""
    st = await write_assessment(redis, tenant, [{"id": cid, "pct": pct, "signals": {"s": 1.0}}], db=db)
    return iid(st, cid)


async def test_listing_counts_up_to_a_bound(
    redis: Redis, durable_store: DurableStore, tenant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A page's total stops counting at offset + COUNTED (a lower bound then, exact False); whether another page
    follows comes from the page itself, not from the count."""
    await write_assessment(redis, tenant, CANDS, ref="mn1:1", db=durable_store)
    q = ReviewQueue(durable_store)
    monkeypatch.setattr(rows_module, "COUNTED", 2)

    async def page(offset: int, limit: int) -> tuple[list[str], int, bool, bool]:
        listed = await q.list(tenant, filters={}, flagged_only=False, status="any", offset=offset, limit=limit)
        return [r[0].candidate_id for r in listed.rows], listed.total, listed.exact, listed.more

    assert await page(0, 2) == (["c", "b"], 2, False, True)
    assert await page(2, 2) == (["d", "a"], 4, False, True)
    assert await page(3, 2) == (["a", "e"], 5, True, False)  # 5 items: within 3 + 2, counted exactly
    monkeypatch.setattr(rows_module, "COUNTED", 5)
    assert await page(0, 5) == (["c", "b", "d", "a", "e"], 5, True, False)


async def test_budget_order_flagged_scope_and_filters(redis: Redis, durable_store: DurableStore, tenant: str) -> None:
    st = await write_assessment(redis, tenant, CANDS, ref="mn1:1", batch_id="b1", db=durable_store)
    q = ReviewQueue(durable_store)
    rows, total, *_ = await q.list(tenant, filters={}, flagged_only=True, status="pending", offset=0, limit=50)
    # forced first, then percentile desc; "a" (rest tier, no flag) is not flagged
    assert [r[0].candidate_id for r in rows] == ["c", "b", "d", "e"] and total == 4
    rows, total, *_ = await q.list(tenant, filters={}, flagged_only=False, status="any", offset=0, limit=50)
    assert [r[0].candidate_id for r in rows] == ["c", "b", "d", "a", "e"] and total == 5
    rows, *_ = await q.list(tenant, filters={"model": "m2"}, flagged_only=False, status="any", offset=0, limit=50)
    assert [r[0].candidate_id for r in rows] == ["b", "d"]
    rows, *_ = await q.list(
        tenant,
        filters={"tier": "top_5", "batch_id": "b1", "lang": "pli"},
        flagged_only=True,
        status="any",
        offset=0,
        limit=50,
    )
    assert [r[0].candidate_id for r in rows] == ["b"]
    page, total, *_ = await q.list(tenant, filters={}, flagged_only=False, status="any", offset=1, limit=2)
    assert [r[0].candidate_id for r in page] == ["b", "d"] and total == 5
    # the worker hook is idempotent
    assert await enqueue_for_review(durable_store, tenant, st) == 0
    item = await q.item(tenant, iid(st, "b"))
    assert item.tenant == tenant and item.passage == "mn1:1" and item.snapshot.signals["s"] == SignalValue(2.0)
    # another tenant sees none of it
    assert (await q.list("someone-else", filters={}, flagged_only=False, status="any", offset=0, limit=9))[1] == 0
    with pytest.raises(NotFound):
        await q.item("someone-else", iid(st, "b"))


async def test_queue_order_is_the_one_ranking_across_assessments(
    redis: Redis, durable_store: DurableStore, tenant: str
) -> None:
    """The queue sorts by risk.priority: forced by severity, then by score, whatever the budget percentile says (two
    assessments ranked against different pools can have percentiles in the other order)."""
    db = durable_store
    await write_assessment(redis, tenant, [{"id": "high", "pct": 90.0, "score": 2.0, "signals": {"s": 2.0}}], db=db)
    await write_assessment(redis, tenant, [{"id": "low", "pct": 95.0, "score": 1.0, "signals": {"s": 1.0}}], db=db)
    await write_assessment(
        redis,
        tenant,
        [
            {"id": "major", "pct": 1.0, "score": 5.0, "forced": True, "signals": {"s": 5.0}},
            {"id": "critical", "pct": 1.0, "score": -3.0, "forced": True, "severity": "critical", "signals": {}},
        ],
        db=db,
    )
    rows, *_ = await ReviewQueue(db).list(tenant, filters={}, flagged_only=False, status="any", offset=0, limit=9)
    assert [r[0].candidate_id for r in rows] == ["critical", "major", "high", "low"]
    assert [round(r[0].priority, 4) for r in rows] == [4.1024, 3.9372, 0.8524, 0.75]
    lease = await ReviewQueue(db).claim(tenant, "alice", 3, 30, flagged_only=False)
    assert [i.rsplit("-", 1)[0] for i in lease.items] == [r[0].assessment_id for r in rows[:3]]


def _claim_at_once(db: DurableStore, tenant: str, reviewers: list[str], n: int) -> list[list[str]]:
    """Each reviewer claims from a thread of its own (its own connection), all released at the same moment."""
    q = ReviewQueue(db)
    start = threading.Barrier(len(reviewers))
    got: dict[str, list[str]] = {}

    def go(who: str) -> None:
        start.wait()
        got[who] = asyncio.run(q.claim(tenant, who, n, 30)).items

    threads = [threading.Thread(target=go, args=(who,)) for who in reviewers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return [got[who] for who in reviewers]


async def test_two_claimants_race_for_one_item(redis: Redis, durable_store: DurableStore, tenant: str) -> None:
    for round_ in range(12):
        await one(redis, durable_store, tenant, f"x{round_}")
        la, lb = await asyncio.to_thread(_claim_at_once, durable_store, tenant, ["alice", "bob"], 1)
        assert len(la) + len(lb) == 1, (round_, la, lb)


async def test_many_claimants_never_share_items(redis: Redis, durable_store: DurableStore, tenant: str) -> None:
    cands = [{"id": f"c{i}", "pct": 80.0 + i, "signals": {"s": 0.0}} for i in range(24)]
    await write_assessment(redis, tenant, cands, db=durable_store)
    leases = await asyncio.to_thread(_claim_at_once, durable_store, tenant, [f"r{i}" for i in range(8)], 4)
    got = [i for lease in leases for i in lease]
    assert len(got) == len(set(got)) == 24
    with durable_store.engine.connect() as con:  # every row names the lease that won it, and its reviewer
        rows = con.execute(sa.select(review_items.c.lease_reviewer).where(review_items.c.tenant == tenant)).all()
    assert sorted(r[0] for r in rows) == sorted(f"r{i}" for i, lease in enumerate(leases) for _ in lease)


async def test_lease_expiry_returns_item(redis: Redis, durable_store: DurableStore, tenant: str) -> None:
    await one(redis, durable_store, tenant)
    q = ReviewQueue(durable_store)
    first = await q.claim(tenant, "alice", 1, 0.3)
    assert len(first.items) == 1
    assert (await q.claim(tenant, "bob", 1, 30)).items == []
    await asyncio.sleep(0.45)
    second = await q.claim(tenant, "bob", 1, 30)
    assert second.items == first.items
    with pytest.raises(NotFound):
        await q.renew(tenant, first.id, "alice", 30)
    with pytest.raises(NotFound):
        await q.release(tenant, first.id, "alice")


async def test_renew_and_release_by_the_holder_or_an_admin(
    redis: Redis, durable_store: DurableStore, tenant: str
) -> None:
    await one(redis, durable_store, tenant, "r1")
    q = ReviewQueue(durable_store)
    lease = await q.claim(tenant, "alice", 5, 0.4)
    with pytest.raises(Forbidden):
        await q.renew(tenant, lease.id, "bob", 30)
    with pytest.raises(Forbidden):
        await q.release(tenant, lease.id, "bob")
    with pytest.raises(NotFound):  # another tenant knows no such lease
        await q.release("someone-else", lease.id, "alice", admin=True)
    renewed = await q.renew(tenant, lease.id, "alice", 30)
    assert renewed.expires_at > lease.expires_at and renewed.reviewer == "alice"
    await asyncio.sleep(0.5)  # past the original expiry: the renewal holds
    assert (await q.claim(tenant, "bob", 1, 30)).items == []
    assert (await q.renew(tenant, lease.id, "an admin", 60, admin=True)).reviewer == "alice"
    assert await q.release(tenant, lease.id, "an admin", admin=True) == 1
    assert (await q.claim(tenant, "bob", 1, 30)).items == lease.items
    with pytest.raises(NotFound):
        await q.release(tenant, lease.id, "alice")


async def test_a_reviewed_item_reads_reviewed_and_is_not_requeued(
    redis: Redis, durable_store: DurableStore, tenant: str
) -> None:
    item = await one(redis, durable_store, tenant, "v")
    q = ReviewQueue(durable_store)
    lease = await q.claim(tenant, "alice", 1, 30)
    await q.verdict(tenant, item, reviewer="alice", label="MAJOR", lease_id=lease.id)
    assert (await q.item_state(tenant, item))[1:4] == ("reviewed", 1, None)
    rows, *_ = await q.list(tenant, filters={}, flagged_only=True, status="reviewed", offset=0, limit=10)
    assert [r[0].id for r in rows] == lease.items and rows[0][1:4] == ("reviewed", 1, None)
    assert (await q.list(tenant, filters={}, flagged_only=True, status="leased", offset=0, limit=10))[1] == 0
    assert (await q.list(tenant, filters={}, flagged_only=True, status="pending", offset=0, limit=10))[1] == 0
    assert await q.release(tenant, lease.id, "alice") == 0  # nothing went back: its one item is reviewed
    assert (await q.claim(tenant, "bob", 1, 30)).items == []


async def test_a_verdict_needs_the_lease_it_cites(redis: Redis, durable_store: DurableStore, tenant: str) -> None:
    """The findings of issue 20: a bogus lease id, another tenant's lease id, another reviewer's lease, no lease on a
    leased item, an expired lease: each refused, nothing recorded."""
    q = ReviewQueue(durable_store)
    item = await one(redis, durable_store, tenant, "mine")
    other_tenant = tenant + "-b"
    await one(redis, durable_store, other_tenant, "theirs")
    theirs = await q.claim(other_tenant, "alice", 1, 30)
    lease = await q.claim(tenant, "alice", 1, 30)
    assert lease.items == [item]
    for reviewer, cited, error in [
        ("alice", "0" * 32, Conflict),  # bogus
        ("alice", theirs.id, Conflict),  # the same reviewer name's lease in another tenant
        ("bob", lease.id, Forbidden),  # another reviewer's lease
        ("bob", None, Conflict),  # leased to another: cite the lease
        ("alice", None, Conflict),  # leased to me: still cite it
    ]:
        with pytest.raises(error):
            await q.verdict(tenant, item, reviewer=reviewer, label="VALID", lease_id=cited)
    assert durable_store.verdicts(tenant, item) == []
    assert (await q.item_state(tenant, item))[1] == "leased"
    # an expired lease no longer holds the item
    await q.release(tenant, lease.id, "alice")
    brief = await q.claim(tenant, "alice", 1, 0.2)
    await asyncio.sleep(0.3)
    with pytest.raises(Conflict):
        await q.verdict(tenant, item, reviewer="alice", label="VALID", lease_id=brief.id)
    # an open item takes a verdict without a lease; a reviewed one a further opinion (no lease needed)
    v1, again = await q.verdict(tenant, item, reviewer="alice", label="MAJOR")
    v2, _ = await q.verdict(tenant, item, reviewer="bob", label="MINOR")
    assert (v1.opinion, v2.opinion, again) == (1, 2, False)
    assert [v.reviewer for v in durable_store.verdicts(tenant, item)] == ["alice", "bob"]


async def test_a_retried_verdict_is_recorded_once(redis: Redis, durable_store: DurableStore, tenant: str) -> None:
    q = ReviewQueue(durable_store)
    item = await one(redis, durable_store, tenant, "r")
    lease = await q.claim(tenant, "alice", 1, 0.3)
    first, replayed = await q.verdict(tenant, item, reviewer="alice", label="MAJOR", note="n", lease_id=lease.id)
    assert not replayed
    await asyncio.sleep(0.35)  # the retry comes after the lease ended: it is still the same verdict
    again, replayed = await q.verdict(tenant, item, reviewer="alice", label="MAJOR", note="n", lease_id=lease.id)
    assert replayed and again.id == first.id and again.opinion == 1
    with pytest.raises(Conflict):  # the same lease with another verdict
        await q.verdict(tenant, item, reviewer="alice", label="VALID", note="n", lease_id=lease.id)
    # a further opinion without a lease: its Idempotency-Key makes the retry safe
    second, replayed = await q.verdict(tenant, item, reviewer="bob", label="MINOR", request_key="k1")
    assert not replayed and second.opinion == 2
    again, replayed = await q.verdict(tenant, item, reviewer="bob", label="MINOR", request_key="k1")
    assert replayed and again.id == second.id
    with pytest.raises(Conflict):
        await q.verdict(tenant, item, reviewer="bob", label="MAJOR", request_key="k1")
    assert [v.id for v in durable_store.verdicts(tenant, item)] == [first.id, second.id]
    assert (await q.item_state(tenant, item))[2] == 2


async def test_the_final_result_refreshes_an_item_and_keeps_its_state(
    redis: Redis, durable_store: DurableStore, tenant: str
) -> None:
    st = await write_assessment(redis, tenant, [{"id": "f", "pct": 99.0, "signals": {"s": 1.0}}], db=durable_store)
    q = ReviewQueue(durable_store)
    before = await q.item(tenant, iid(st, "f"))
    lease = await q.claim(tenant, "alice", 1, 30)
    [fresh] = queue_items(tenant, st)
    moved = msgspec.structs.replace(fresh, priority=fresh.priority + 1, enqueued_at=before.enqueued_at + 50)
    assert await q.add(tenant, [moved]) == 0  # without refresh a known item is kept as it is
    assert (await q.item(tenant, before.id)).priority == before.priority
    assert await q.add(tenant, [moved], refresh=True) == 0
    after, status, _, lease_id, _, _ = await q.item_state(tenant, before.id)
    assert after.priority == before.priority + 1 and after.enqueued_at == before.enqueued_at
    assert (status, lease_id) == ("leased", lease.id)


async def test_items_end_with_their_assessment(redis: Redis, durable_store: DurableStore, tenant: str) -> None:
    """Items past their assessment's retention are never listed, claimed or reviewed; forget_items removes one
    assessment's items; deleting an assessment removes its items in the same transaction, and so does the purge."""
    db, q = durable_store, ReviewQueue(durable_store)
    kept = await write_assessment(redis, tenant, [{"id": "k", "pct": 99.0, "signals": {"s": 1.0}}], db=db)
    gone = await write_assessment(redis, tenant, [{"id": "g", "pct": 99.5, "signals": {"s": 2.0}}], db=db)
    other = await write_assessment(redis, tenant + "-b", [{"id": "o", "pct": 99.0, "signals": {"s": 1.0}}], db=db)
    old = msgspec.structs.replace(gone.meta, created_at=time.time() - 601)
    [expired] = queue_items(tenant, dataclasses.replace(gone, meta=old), retention_seconds=600)
    assert await q.add(tenant, [expired], refresh=True) == 0
    rows, total, *_ = await q.list(tenant, filters={}, flagged_only=False, status="any", offset=0, limit=9)
    assert [r[0].id for r in rows] == [iid(kept, "k")] and total == 1
    with pytest.raises(NotFound):
        await q.item(tenant, iid(gone, "g"))
    with pytest.raises(NotFound):
        await q.verdict(tenant, iid(gone, "g"), reviewer="alice", label="VALID")
    assert (await q.claim(tenant, "alice", 5, 30)).items == [iid(kept, "k")]
    assert await asyncio.to_thread(forget_items, db, tenant, [kept.meta.id, other.meta.id]) == 1
    with db.engine.connect() as con:
        left = con.execute(
            sa.select(review_items.c.tenant, review_items.c.id).where(review_items.c.tenant.like(tenant + "%"))
        )
        # what is left: the other tenant's item, and the expired item until its assessment is purged (below)
        assert sorted(tuple(r) for r in left) == sorted([(tenant, iid(gone, "g")), (tenant + "-b", iid(other, "o"))])
    assert await asyncio.to_thread(forget_items, db, tenant, [kept.meta.id]) == 0  # safe to repeat

    # deleting an assessment takes its items with it; so does the purge of those past the retention
    store = Store(redis, retention_seconds=600, db=db)
    assert await store.forget_assessments(tenant + "-b", [other.meta.id]) == [other.meta.id]
    assert await asyncio.to_thread(forget_items, db, tenant + "-b", [other.meta.id]) == 0
    with db.engine.begin() as con:  # ``gone`` becomes as old as its item says
        con.execute(assessments.update().where(assessments.c.id == gone.meta.id).values(created_at=old.created_at))
    assert await purge_once(store, 600) >= 1  # ``gone``, created 601 s ago, and its expired item (the store is shared)
    with db.engine.connect() as con:
        assert con.execute(sa.select(review_items.c.id).where(review_items.c.tenant.like(tenant + "%"))).all() == []


async def test_bad_claims(durable_store: DurableStore, tenant: str) -> None:
    q = ReviewQueue(durable_store)
    with pytest.raises(InputError):
        await q.claim(tenant, "alice", 0, 30)
    with pytest.raises(InputError):
        await q.claim(tenant, "alice", 1, 0)
