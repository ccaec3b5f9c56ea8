"""The store's write-once parts, the atomic Idempotency-Key claim, the budget pool that finalize reads, callbacks
never sent again once delivered, packed records: on both engines of the durable store."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio
from redis.asyncio import Redis

from service.core.budget import Budget, SeenScores
from service.core.novelty_report import NoveltySkipped
from service.core.pipeline import Scored, final_part
from service.core.ranking import priority
from service.core.records import (
    AssessmentMeta,
    AssessmentRequest,
    CallbackState,
    CandidateFinal,
    CandidateIn,
    CandidateOutcome,
    CheapPart,
    CheapSignature,
    FinalPart,
    SourceIn,
)
from service.core.risk import ReferenceDistribution, RiskModel, RiskResult, SignalWeight
from service.platform.errors import Conflict, NotFound
from service.state.durable import DurableStore
from service.state.durable.packing import pack, unpack
from service.state.store import Store
from tests.conftest import TEST_REDIS_URL

TENANT = f"test-store-{uuid.uuid4().hex[:8]}"
UNIFORM = ReferenceDistribution(data="uniform", n=1000, quantiles=[k / 1000 for k in range(1001)])
MODEL = RiskModel(
    name="m",
    version="1",
    description="",
    requires_peers=False,
    signals=[SignalWeight(name="s", weight=1.0, mean=0.0, sd=1.0)],
    reference=UNIFORM,
)


@pytest_asyncio.fixture(loop_scope="function")
async def store(durable_store: DurableStore) -> AsyncIterator[Store]:
    r = Redis.from_url(TEST_REDIS_URL)
    yield Store(r, retention_seconds=600, db=durable_store)
    await r.aclose()


def _meta(aid: str | None = None) -> AssessmentMeta:
    req = AssessmentRequest(source=SourceIn(text="Evaṃ me sutaṃ."), candidates=[CandidateIn(id="a", text="Thus.")])
    return AssessmentMeta(
        id=aid or uuid.uuid4().hex,
        tenant=TENANT,
        created_at=time.time(),
        request=req,
        checks=["hard_flags"],
        novelty=NoveltySkipped(reason="test"),
        parts=["cheap"],
    )


def _final(score: float) -> FinalPart:
    risk = RiskResult(score=score, priority=priority(score, None), rule="m@1", components={})
    budget = Budget(percentile=50.0, tier="rest", reference_n=0, seen_n=0, forced=False)
    return FinalPart(
        finished_at=time.time(),
        candidates={"a": CandidateFinal(risk=risk, routing=None, flags=[], budget=budget)},
        risk_models=["m@1"],
    )


def _cheap(value: float) -> CheapPart:
    from service.core.types import SignalValue

    return CheapPart(
        finished_at=time.time(),
        candidates={"a": CandidateOutcome(signals={"s": SignalValue(value)}, flags=[])},
        signature=CheapSignature(embedding={}),
        routing={},
    )


async def test_parts_are_written_once(store: Store) -> None:
    meta = _meta()
    await store.create(meta)
    assert await store.put_final(TENANT, meta.id, _final(1.0)) is True
    assert await store.put_final(TENANT, meta.id, _final(2.0)) is False  # the first result stands
    assert await store.put_cheap(TENANT, meta.id, _cheap(1.0)) is True
    assert await store.put_cheap(TENANT, meta.id, _cheap(9.0)) is False
    state = await store.get(TENANT, meta.id)
    assert state.final is not None and state.final.candidates["a"].risk.score == 1.0
    assert state.cheap is not None and state.cheap.candidates["a"].signals["s"].value == 1.0  # type: ignore[union-attr]


async def test_idempotency_key_race_creates_one_assessment_both_can_read(store: Store) -> None:
    """Two concurrent requests with one key: one creates, the other gets its id and can read it at once."""
    other = Store(Redis.from_url(TEST_REDIS_URL), retention_seconds=600, db=store.db)
    key = uuid.uuid4().hex
    for _ in range(20):
        key = uuid.uuid4().hex
        a, b = _meta(), _meta()
        results = await asyncio.gather(
            store.create_idempotent(a, key, "sha-1"), other.create_idempotent(b, key, "sha-1")
        )
        assert sorted(results, key=lambda r: r is None) in ([a.id, None], [b.id, None])
        winner = a.id if results[1] == a.id else b.id
        assert (await store.get(TENANT, winner)).meta.id == winner  # the replayed id is readable, never a 404
        assert not await store.exists(TENANT, b.id if winner == a.id else a.id)  # the loser wrote nothing
    with pytest.raises(Conflict):
        await store.create_idempotent(_meta(), key, "sha-2")
    await other.redis.aclose()


def test_final_part_pools_the_reference_with_the_tenants_seen_scores() -> None:
    cands = [CandidateIn(id="a", text="x"), CandidateIn(id="b", text="y")]
    scored = {
        cid: Scored(MODEL, RiskResult(score=s, priority=priority(s, None), rule="m@1", components={}), [])
        for cid, s in (("a", 0.5), ("b", 0.9))
    }
    cheap = CheapPart(time.time(), {}, CheapSignature(embedding={}), {})
    alone = final_part(cands, cheap, scored, {})
    assert alone.candidates["a"].budget.percentile == pytest.approx(50.05, abs=1e-3)
    # 1,000 seen scores of this model, all above "a" and all below "b"
    seen = {"m@1": SeenScores(total=1000, at_or_below=[0, 1000])}
    pooled = final_part(cands, cheap, scored, seen)
    assert pooled.candidates["a"].budget.percentile == pytest.approx(25.025, abs=1e-3)
    assert pooled.candidates["b"].budget.percentile == pytest.approx(95.005, abs=1e-3)
    assert pooled.candidates["b"].budget.seen_n == 1000 and pooled.candidates["b"].budget.tier == "top_5"
    assert alone.candidates["b"].budget.tier == "top_10"


async def test_seen_counts_are_at_or_below_and_pooled_once_per_assessment(store: Store) -> None:
    meta = _meta()
    await store.create(meta)
    assert await store.record_scores(TENANT, meta.id, {"m@1": [1.0, 2.0, 3.0], "m@2": [5.0]}) is True
    assert await store.record_scores(TENANT, meta.id, {"m@1": [1.0]}) is False  # a re-run tail: no double count
    assert await store.seen_counts(TENANT, "m@1", [0.5, 2.0, 9.0]) == (3, [0, 2, 3])
    assert await store.seen_counts(TENANT, "m@2", [4.999, 5.0]) == (1, [0, 1])
    other = _meta()
    await store.create(other)
    assert await store.record_scores(TENANT, other.id, {"m@1": [2.0, -1.0]}) is True  # same bucket adds up
    assert await store.seen_counts(TENANT, "m@1", [1.9, 2.0]) == (5, [2, 4])
    assert await store.seen_counts(f"{TENANT}-other", "m@1", [2.0]) == (0, [0])


async def test_a_delivered_callback_is_never_replaced(store: Store) -> None:
    meta = _meta()
    await store.create(meta)
    await store.open_callback(TENANT, meta.id, "https://example.test/cb", "cheap")
    await store.open_callback(TENANT, meta.id, "https://example.test/other", "cheap")  # kept as it is
    state = await store.get(TENANT, meta.id)
    assert state.cheap_callback == CallbackState(url="https://example.test/cb")
    done = CallbackState(url="https://example.test/cb", status="delivered", attempts=1, delivered_at=1.0)
    assert await store.put_callback(TENANT, meta.id, done, "cheap") is True
    # a redelivered job that read "pending" before and failed afterwards cannot undo the acknowledgement
    late = CallbackState(url="https://example.test/cb", status="pending", attempts=2, last_error="timeout")
    assert await store.put_callback(TENANT, meta.id, late, "cheap") is False
    assert (await store.get(TENANT, meta.id)).cheap_callback == done


async def test_state_marks_and_first_llm_start(store: Store) -> None:
    meta = _meta()
    await store.create(meta)
    first = await store.llm_started_at(TENANT, meta.id)
    assert await store.llm_started_at(TENANT, meta.id) == first  # every try counts from the first
    await store.mark_started(TENANT, meta.id)
    assert (await store.get(TENANT, meta.id)).status == "running"
    await store.put_final(TENANT, meta.id, _final(1.0))
    await store.mark_tail_done(TENANT, meta.id)
    state = await store.get(TENANT, meta.id)
    assert state.status == "done" and state.tail_done
    await store.mark_failed(TENANT, meta.id, "boom")
    assert (await store.get(TENANT, meta.id)).status == "failed"
    with pytest.raises(NotFound):
        await store.get(f"{TENANT}-other", meta.id)  # tenant-scoped


def test_packed_records_are_compressed_when_that_pays() -> None:
    small = {"a": 1}
    assert pack(small)[:1] == b"j" and unpack(pack(small)) == small
    big = {"text": "Evaṃ me sutaṃ. " * 200}
    packed = pack(big)
    assert packed[:1] == b"z" and len(packed) < len("Evaṃ me sutaṃ. ".encode()) * 20
    assert unpack(packed) == big


async def test_submissions_on_sqlite_wait_for_the_write_lock_on_one_thread_of_their_own(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite has one writer at a time: concurrent submissions queue on the store's submissions thread, so the shared
    thread pool stays free for novelty and reads meanwhile; PostgreSQL takes writers side by side (the shared pool)."""
    import threading

    threads: list[str] = []
    create = store.records.create

    def recording(*args: object) -> object:
        threads.append(threading.current_thread().name)
        return create(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(store.records, "create", recording)
    metas = [_meta() for _ in range(6)]
    await asyncio.gather(*(store.create(m) for m in metas[:3]), store.create_many(metas[3:]))
    await store.create_idempotent(_meta(), uuid.uuid4().hex, "sha")
    assert len(threads) == 5 and all([await store.exists(TENANT, m.id) for m in metas])
    if store.db.dialect == "sqlite":
        assert set(threads) == {"trisk-sqlite-submissions_0"}
    else:
        assert store.db.submissions is None and "trisk-sqlite-submissions_0" not in threads
