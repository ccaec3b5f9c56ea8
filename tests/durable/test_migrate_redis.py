"""``trisk migrate-redis``: the records an earlier release kept in Redis (its layout, written here by hand) land in the
durable store as the same states; a second run copies nothing and counts no score twice; a part Redis got after the
first run is filled in by the next; on both engines."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import msgspec
import pytest
import redis

from service.core.records import BatchMeta, CallbackState
from service.platform.errors import NotFound
from service.state.durable import DurableStore
from service.state.durable.redis_import import migrate_redis
from service.state.store import Store
from tests.conftest import TEST_REDIS_URL
from tests.core.test_store import _cheap, _final, _meta

enc = msgspec.json.encode


@pytest.fixture()
def old_redis() -> Iterator[tuple[redis.Redis, str]]:
    """The test Redis db with an old release's records of a tenant of this test's own."""
    r = redis.Redis.from_url(TEST_REDIS_URL)
    tenant = f"test-migrate-{uuid.uuid4().hex[:8]}"
    yield r, tenant
    for key in r.scan_iter(match=f"trisk:t:{tenant}:*"):
        r.delete(key)
    r.close()


def _old_layout(r: redis.Redis, tenant: str) -> tuple[str, str, str]:
    done, running = _meta(), _meta()
    for m in (done, running):
        m.tenant = tenant
    delivered = CallbackState(url="https://example.test/cb", status="delivered", attempts=1, delivered_at=5.0)
    base = f"trisk:t:{tenant}"
    r.hset(
        f"{base}:a:{done.id}",
        mapping={
            "meta": enc(done),
            "part:cheap": enc(_cheap(1.0)),
            "final": enc(_final(1.5)),
            "started": b"1",
            "tail": b"done",
            "callback": enc(delivered),
        },
    )
    r.hset(f"{base}:a:{running.id}", mapping={"meta": enc(running), "part:cheap": enc(_cheap(2.0)), "started": b"1"})
    r.set(f"{base}:idem:key-1", enc({"id": done.id, "sha": "sha-1"}))
    batch = BatchMeta(id=uuid.uuid4().hex, tenant=tenant, created_at=1.0, assessment_ids=[done.id])
    r.hset(f"{base}:b:{batch.id}", "meta", enc(batch))
    # the pool holds the finished assessment's score and one of an assessment that expired long ago
    r.zadd(f"{base}:seen:m@1", {f"{done.id}:a": 1.5, "gone:a": 0.25})
    return done.id, running.id, batch.id


def test_migrate_redis_copies_every_record_once(
    old_redis: tuple[redis.Redis, str], durable_store: DurableStore
) -> None:
    r, tenant = old_redis
    done_id, running_id, batch_id = _old_layout(r, tenant)
    store = Store(None, retention_seconds=600, db=durable_store)

    copied = migrate_redis(r, durable_store, tenant=tenant)
    assert copied["assessments"] == 2 and copied["batches"] == 1 and copied["idempotency keys"] == 1
    assert copied["pooled scores"] == 2

    done = asyncio.run(store.get(tenant, done_id))
    assert done.status == "done" and done.tail_done and done.final == _final_or(done)
    assert done.cheap is not None and done.callback is not None and done.callback.status == "delivered"
    running = asyncio.run(store.get(tenant, running_id))
    assert running.status == "running" and running.final is None and running.cheap is not None
    assert asyncio.run(store.get_batch(tenant, batch_id)).assessment_ids == [done_id]
    assert asyncio.run(store.seen_counts(tenant, "m@1", [0.3, 2.0])) == (2, [1, 2])
    # the key still names its assessment: a replay answers it, another body is a conflict
    assert asyncio.run(store.create_idempotent(_meta_of(tenant), "key-1", "sha-1")) == done_id
    # the imported pool marked the finished assessment pooled: a re-run tail adds nothing
    assert asyncio.run(store.record_scores(tenant, done_id, {"m@1": [1.5]})) is False

    assert migrate_redis(r, durable_store, tenant=tenant) == {}  # a second run copies nothing
    assert asyncio.run(store.seen_counts(tenant, "m@1", [2.0])) == (2, [2])

    # the old release finished the running one after the first run: the next run fills the parts in
    r.hset(f"trisk:t:{tenant}:a:{running_id}", mapping={"final": enc(_final(2.5)), "tail": b"done"})
    assert migrate_redis(r, durable_store, tenant=tenant) == {"assessments filled in": 1}
    with pytest.raises(ValueError):
        migrate_redis(r, durable_store, tenant="test-*")  # one tenant's name, never a pattern
    again = asyncio.run(store.get(tenant, running_id))
    assert again.status == "done" and again.final is not None
    assert again.final.candidates["a"].risk.score == 2.5


def _final_or(state: object) -> object:
    final = getattr(state, "final", None)
    assert final is not None and final.candidates["a"].risk.score == 1.5
    return final


def _meta_of(tenant: str) -> object:
    m = _meta()
    m.tenant = tenant
    return m


def test_the_cli_copies_and_reports(old_redis: tuple[redis.Redis, str], capsys: pytest.CaptureFixture[str]) -> None:
    from service.cli import main

    r, tenant = old_redis
    _old_layout(r, tenant)
    assert main(["migrate-redis", "--redis-url", TEST_REDIS_URL, "--tenant", tenant]) == 0
    out = capsys.readouterr().out
    assert "assessments: 2" in out and "batches: 1" in out
    assert main(["migrate-redis", "--redis-url", TEST_REDIS_URL, "--tenant", tenant]) == 0
    assert "nothing to copy" in capsys.readouterr().out  # every record is in the store already


def test_the_cli_rebuilds_the_review_queue_with_the_verdicts_given(
    old_redis: tuple[redis.Redis, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """An earlier release kept the review queue in Redis: the migration puts the copied results' candidates in the
    store's queue, and an item its reviewers had judged reads ``reviewed`` (its verdicts are in the store already)."""
    from service.cli import main
    from service.platform.settings import get_settings
    from service.review import ReviewQueue, item_id_of
    from service.state.durable import open_store
    from service.state.durable.schema import review_items

    r, tenant = old_redis
    done_id, running_id, _ = _old_layout(r, tenant)
    args = ["migrate-redis", "--redis-url", TEST_REDIS_URL, "--tenant", tenant]
    assert main(args) == 0
    assert "review items: " in capsys.readouterr().out
    db = open_store(get_settings().durable)
    queue = ReviewQueue(db)
    item = item_id_of(done_id, "a")
    assert asyncio.run(queue.item_state(tenant, item))[1] == "open"
    with pytest.raises(NotFound):  # no published result, no item
        asyncio.run(queue.item_state(tenant, item_id_of(running_id, "a")))

    asyncio.run(queue.verdict(tenant, item, reviewer="ana", label="MAJOR"))
    with db.engine.begin() as con:  # as before the upgrade: the verdict in the store, the item only in Redis
        con.execute(review_items.delete().where(review_items.c.tenant == tenant))
    assert main(args) == 0
    assert "review items: 1" in capsys.readouterr().out
    _, status, verdicts, *_ = asyncio.run(queue.item_state(tenant, item))
    assert (status, verdicts) == ("reviewed", 1)
    assert main(args) == 0  # again: nothing new, the count stays
    assert asyncio.run(queue.item_state(tenant, item))[2] == 1
