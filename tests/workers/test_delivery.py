"""At-least-once delivery, tested like arq's own tests: a real worker in burst mode, jobs retried and redelivered.

Faults are injected through the worker's ``ctx`` (its shared clients), never by patching modules: a store whose
writes fail a given number of times, an embedder that raises an upstream error, a critical checker that counts how
often the cheap tier ran, a callback receiver that answers 500 before 200.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from arq import create_pool
from arq.connections import RedisSettings
from redis.asyncio import Redis

from service.core.critical import default_checker
from service.platform.errors import UpstreamUnavailable
from service.platform.settings import Settings, get_settings
from service.state.store import Store
from tests.conftest import TEST_REDIS_URL, TEST_TENANT
from tests.durable_support import review_item_ids
from tests.records_support import pooled_count, record_fields, store_of
from tests.worker_support import CallbackReceiver, run_worker_burst
from workers.lifecycle import Embedders
from workers.policy import MAX_TRIES

SOURCE = "Sattaratanasampannā, Tīsu sikkhāsu sikkhitā; Anuvicaranti mahāvīrā, Pahīnabhayabheravā."
GOOD = [
    "Endowed with the seven treasures, trained in the three trainings, the great heroes wander, fearless.",
    "Possessed of the seven gems, trained in the three trainings, great heroes roam about, fear abandoned.",
    "Accomplished in seven jewels, trained in the threefold training, the mighty heroes wander, free of dread.",
]


def _body(**extra: Any) -> dict[str, Any]:
    return {
        "source": {"text": SOURCE, "lang": "pli", "ref": "sn22.76:7"},
        "candidates": [{"id": f"c{i}", "text": t, "model": f"vendor/m{i}"} for i, t in enumerate(GOOD)],
        "checks": ["peer_distance", "hard_flags", "critical", "length_ratio"],
        **extra,
    }


def _no_wait(tries: int) -> float:
    return 0.05


class CountingChecker:
    """The real critical checker, counting how often the cheap tier ran."""

    def __init__(self) -> None:
        self.inner = default_checker()
        self.signature = self.inner.signature
        self.calls = 0

    def check_passage(self, *args: Any, **kwargs: Any) -> Any:
        self.calls += 1
        return self.inner.check_passage(*args, **kwargs)


class FlakyStore(Store):
    """A store whose named writes raise ConnectionError the given number of times (a Redis blip), then work."""

    def __init__(self, failures: dict[str, int], **kw: Any) -> None:
        super().__init__(Redis.from_url(TEST_REDIS_URL), retention_seconds=600, **kw)
        self.failures = dict(failures)
        self.calls: dict[str, int] = {}

    def _maybe_fail(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1
        if self.failures.get(name, 0) > 0:
            self.failures[name] -= 1
            raise ConnectionError(f"injected failure of {name}")

    async def record_scores(self, tenant: str, aid: str, by_rule: dict[str, list[float]]) -> bool:
        self._maybe_fail("record_scores")
        return await super().record_scores(tenant, aid, by_rule)

    async def mark_tail_done(self, tenant: str, aid: str) -> None:
        self._maybe_fail("mark_tail_done")
        await super().mark_tail_done(tenant, aid)


class CrashAfterFinal(Store):
    """The worker is cancelled (shut down, killed) right after it wrote the final part, before any of the tail."""

    def __init__(self) -> None:
        super().__init__(Redis.from_url(TEST_REDIS_URL), retention_seconds=600)
        self.crashed = False

    async def put_final(self, tenant: str, aid: str, part: Any) -> bool:
        won = await super().put_final(tenant, aid, part)
        if not self.crashed:
            self.crashed = True
            raise asyncio.CancelledError()
        return won


class CrashAfterCheap(Store):
    """The worker is cancelled right after it wrote the cheap tier's part, before the final one."""

    def __init__(self) -> None:
        super().__init__(Redis.from_url(TEST_REDIS_URL), retention_seconds=600)
        self.crashed = False

    async def put_cheap(self, tenant: str, aid: str, part: Any) -> bool:
        won = await super().put_cheap(tenant, aid, part)
        if not self.crashed:
            self.crashed = True
            raise asyncio.CancelledError()
        return won


class FlakyEmbedder:
    """The real peer encoder behind an upstream that fails ``failures`` times first (a remote embedding backend)."""

    def __init__(self, inner: Any, failures: int) -> None:
        self.inner = inner
        self.model_id = inner.model_id
        self.signature = inner.signature
        self.failures = failures
        self.calls = 0

    def embed(self, texts: list[str], kind: str = "passage") -> Any:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise UpstreamUnavailable("embedding provider: HTTP 503 (injected)")
        return self.inner.embed(texts, kind=kind)


def _state(aid: str) -> dict[bytes, bytes]:
    return record_fields(store_of(), TEST_TENANT, aid)


def _seen(rule: str) -> int:
    return pooled_count(store_of(), TEST_TENANT, rule)


def _queue_items(aid: str) -> list[str]:
    return review_item_ids(get_settings().durable, TEST_TENANT, aid)


def _redeliver(settings: Settings, function: str, aid: str, suffix: str) -> None:
    """Queue a job again as a redelivery would (arq dedups by job id, so give it another one)."""

    async def go() -> None:
        pool = await create_pool(
            RedisSettings.from_dsn(settings.redis.url), default_queue_name=settings.redis.queue_name
        )
        await pool.enqueue_job(function, TEST_TENANT, aid, _job_id=f"{aid}:{suffix}")
        await pool.aclose()

    asyncio.run(go())


def test_a_job_delivered_twice_computes_once_and_changes_nothing(client: Any, settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    checker = CountingChecker()
    assert run_worker_burst(settings, ctx={"critical": checker}).jobs_failed == 0
    first = client.get(f"/v1/assessments/{aid}").json()
    fields = _state(aid)
    rule = first["candidates"][0]["risk"]["rule"]
    seen = _seen(rule)
    assert checker.calls == 1 and first["status"] == "done"
    assert seen >= 3
    assert len(_queue_items(aid)) == 3

    _redeliver(settings, "assess_cheap", aid, "again")
    _redeliver(settings, "assess_cheap", aid, "and-again")
    assert run_worker_burst(settings, ctx={"critical": checker}).jobs_failed == 0
    assert checker.calls == 1  # the cheap tier never ran again
    after = _state(aid)
    assert after[b"part:cheap"] == fields[b"part:cheap"] and after[b"final"] == fields[b"final"]
    assert client.get(f"/v1/assessments/{aid}").json() == first
    assert _seen(rule) == seen  # no score pooled twice
    assert len(_queue_items(aid)) == 3


def test_a_redelivery_after_the_cheap_part_finalizes_from_it(client: Any, settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    store = CrashAfterCheap()
    checker = CountingChecker()
    worker = run_worker_burst(settings, ctx={"store": store, "critical": checker})
    assert store.crashed and worker.jobs_retried == 1 and worker.jobs_failed == 0
    assert checker.calls == 1  # the stored cheap part was used, not computed again
    assert client.get(f"/v1/assessments/{aid}").json()["status"] == "done"


def test_a_crash_between_the_final_write_and_the_tail_is_made_good(client: Any, settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    store = CrashAfterFinal()
    checker = CountingChecker()
    worker = run_worker_burst(settings, ctx={"store": store, "critical": checker, "retry_delay": _no_wait})
    assert store.crashed and worker.jobs_retried >= 1 and worker.jobs_failed == 0
    assert checker.calls == 1  # the redelivery finalized from the stored cheap part
    done = client.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["error"] is None
    fields = _state(aid)
    assert fields.get(b"tail") == b"done"
    rule = done["candidates"][0]["risk"]["rule"]
    assert _seen(rule) >= 3 and b"pooled" in fields  # the tail pooled its scores
    assert len(_queue_items(aid)) == 3


def test_a_failing_tail_is_retried_and_never_marks_the_assessment_failed(client: Any, settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    store = FlakyStore({"record_scores": 2})
    worker = run_worker_burst(settings, ctx={"store": store, "retry_delay": _no_wait})
    assert worker.jobs_failed == 0 and worker.jobs_retried == 2
    assert store.calls["record_scores"] == 3
    done = client.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and done["error"] is None
    assert len(_queue_items(aid)) == 3


def test_a_tail_that_keeps_failing_is_reported_but_the_result_stands(client: Any, settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    store = FlakyStore({"mark_tail_done": 99})
    run_worker_burst(settings, ctx={"store": store, "retry_delay": _no_wait})
    assert store.calls["mark_tail_done"] == MAX_TRIES
    done = client.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done" and all(c["risk"] is not None for c in done["candidates"])
    assert b"failed" not in _state(aid) and b"injected" in _state(aid)[b"tail_error"]


def test_a_transient_upstream_error_is_retried(client: Any, settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    embedders = Embedders(settings)
    embedders.peer = FlakyEmbedder(embedders.peer, failures=1)
    worker = run_worker_burst(settings, ctx={"embedders": embedders, "retry_delay": _no_wait})
    assert worker.jobs_retried == 1 and worker.jobs_failed == 0
    assert embedders.peer.calls == 2
    done = client.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "done"
    assert done["candidates"][0]["signals"]["peer_centroid_distance"]["status"] == "value"


def test_an_upstream_that_never_recovers_fails_visibly_after_the_last_try(client: Any, settings: Settings) -> None:
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    embedders = Embedders(settings)
    embedders.peer = FlakyEmbedder(embedders.peer, failures=99)
    run_worker_burst(settings, ctx={"embedders": embedders, "retry_delay": _no_wait})
    assert embedders.peer.calls == MAX_TRIES
    done = client.get(f"/v1/assessments/{aid}").json()
    assert done["status"] == "failed" and "HTTP 503 (injected)" in done["error"]


def test_a_delivery_beyond_the_last_try_records_the_lost_worker(client: Any, settings: Settings) -> None:
    """ARQ redelivers a job whose worker died; past MAX_TRIES the job only records why it gives up."""
    aid = client.post("/v1/assessments", json=_body()).json()["id"]
    r = redis.Redis.from_url(TEST_REDIS_URL)
    r.setex(f"arq:retry:{aid}:cheap", 60, str(MAX_TRIES))  # MAX_TRIES deliveries already started (and died)
    checker = CountingChecker()
    run_worker_burst(settings, ctx={"critical": checker})
    done = client.get(f"/v1/assessments/{aid}").json()
    assert checker.calls == 0
    assert done["status"] == "failed" and "worker running it was lost" in done["error"]


@pytest.fixture()
def receiver() -> Iterator[CallbackReceiver]:
    rec = CallbackReceiver([500, 200])
    yield rec
    rec.close()


def test_a_callback_that_fails_then_succeeds_is_delivered_once(
    client: Any, settings: Settings, receiver: CallbackReceiver
) -> None:
    aid = client.post("/v1/assessments", json=_body(callback_url=receiver.url)).json()["id"]
    run_worker_burst(replace(settings, jobs=replace(settings.jobs, callback_max_tries=3)))
    done = client.get(f"/v1/assessments/{aid}").json()
    assert [b["id"] for b in receiver.bodies] == [aid, aid]  # one failed POST, one delivered
    assert receiver.bodies[1]["status"] == "done" and receiver.bodies[1]["candidates"][0]["risk"]["priority"] > 0
    cb = done["callback"]
    assert (cb["status"], cb["attempts"], cb["last_error"]) == ("delivered", 2, None)
    # a redelivered finalize queues the callback again, and the delivered callback is not sent twice
    _redeliver(settings, "deliver_callback", aid, "callback-again")
    run_worker_burst(settings)
    assert len(receiver.bodies) == 2


class FailsOnceAtLLMPart(Store):
    """A store whose first write of the LLM part raises ConnectionError (a Redis or database blip)."""

    def __init__(self) -> None:
        super().__init__(Redis.from_url(TEST_REDIS_URL), retention_seconds=600)
        self.failed = False

    async def put_llm(self, tenant: str, aid: str, part: Any) -> bool:
        if not self.failed:
            self.failed = True
            raise ConnectionError("injected failure of put_llm")
        return await super().put_llm(tenant, aid, part)


def test_a_worker_without_a_provider_retries_an_end_that_failed_and_finishes(client: Any, settings: Settings) -> None:
    """A worker without an LLM provider ends a requested LLM tier as skipped; when the store fails while it does, the
    job is retried (it used to report 'done; llm skipped' and leave the assessment running for good)."""
    body = _body()
    body["checks"] = [*body["checks"], "gemba"]
    aid = client.post("/v1/assessments", json=body).json()["id"]
    store = FailsOnceAtLLMPart()
    worker = run_worker_burst(settings, ctx={"store": store, "llm": None, "retry_delay": _no_wait})
    assert store.failed and worker.jobs_retried >= 1 and worker.jobs_failed == 0
    got = client.get(f"/v1/assessments/{aid}").json()
    assert got["status"] == "done", got["status"]
    assert got["llm_tier"]["status"] == "skipped", got["llm_tier"]
