"""The reconciler: which jobs it queues again for the store's unfinished records (each by its fixed id), which records
it leaves alone (finished, failed, or with a job Redis still holds), and that a second round queues nothing."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from service.core.records import CallbackState
from service.state.durable import DurableStore
from service.state.store import Store
from tests.conftest import TEST_REDIS_URL
from tests.core.test_store import _cheap, _final, _meta
from workers.reconcile import reconcile_once


def test_unfinished_records_get_their_jobs_back_and_nothing_else(durable_store: DurableStore) -> None:
    asyncio.run(_scenario(durable_store))


async def _scenario(db: DurableStore) -> None:
    queue = f"trisk:test:reconcile:{uuid.uuid4().hex[:8]}"
    pool: Any = await create_pool(RedisSettings.from_dsn(TEST_REDIS_URL), default_queue_name=queue)
    store = Store(None, retention_seconds=600, db=db)
    try:
        pending, llm, callback, finished, failed, queued, ended = (_meta() for _ in range(7))
        # a tenant of this test's own: the session's PostgreSQL database holds other tests' unfinished records too
        tenant = f"test-reconcile-{uuid.uuid4().hex[:8]}"
        for m in (pending, llm, callback, finished, failed, queued, ended):
            m.tenant = tenant
        llm.parts = ["cheap", "llm"]
        callback.request.callback_url = "https://example.test/cb"  # type: ignore[assignment]
        for m in (pending, llm, callback, finished, failed, queued, ended):
            m.created_at = time.time() - 100
        await store.create_many([pending, llm, callback, finished, failed, queued, ended])
        # its job ended without finishing it (the store was away on its last try): ARQ keeps that run's result
        await pool.set(f"arq:result:{ended.id}:cheap", b"x", ex=600)
        await store.put_cheap(tenant, llm.id, _cheap(1.0))
        for m in (callback, finished):
            await store.put_cheap(tenant, m.id, _cheap(1.0))
            await store.put_final(tenant, m.id, _final(1.0))
            await store.mark_tail_done(tenant, m.id)
        await store.open_callback(tenant, callback.id, "https://example.test/cb", "final")
        await store.put_callback(tenant, callback.id, CallbackState(url="https://example.test/cb"), "final")
        await store.open_callback(tenant, failed.id, "https://example.test/cb", "cheap")
        await store.mark_failed(tenant, failed.id, "boom")  # its pending callback is never sent
        await pool.enqueue_job("assess_cheap", tenant, queued.id, _job_id=f"{queued.id}:cheap")  # Redis holds it
        poller = {"tenant": tenant, "kind": "poller", "id": uuid.uuid4().hex, "created_at": time.time() - 100}
        adj = {"tenant": tenant, "kind": "adjudication", "id": uuid.uuid4().hex, "created_at": time.time() - 100}
        store.records.create_judge_job({**poller, "plan": b"j{}"})
        store.records.create_judge_job({**adj, "plan": b"j{}"})
        young = _meta()
        young.tenant = tenant
        await store.create(young)  # younger than the cut-off: the API may be queueing it right now

        assert await reconcile_once(store, pool, older_than=time.time() - 10) >= 6  # (others' records too)
        ours = [m.id for m in (pending, llm, callback, finished, failed, queued, ended, young)]
        ours += [poller["id"], adj["id"]]
        ids = sorted(j for m in await pool.zrange(queue, 0, -1) if any(a in (j := m.decode()) for a in ours))
        assert ids == sorted(
            [
                f"{pending.id}:cheap",
                f"{llm.id}:llm",
                f"{callback.id}:callback",
                f"{queued.id}:cheap",
                f"{ended.id}:cheap",
                f"jj:poller:{poller['id']}",
                f"adj:{adj['id']}",
            ]
        )
        assert await reconcile_once(store, pool, older_than=time.time() - 10) == 0  # every job is held now
    finally:
        for jid in await pool.zrange(queue, 0, -1):
            await pool.delete(b"arq:job:" + jid)
        await pool.delete(queue)
        await pool.aclose()
