"""The records of assessments and batches, keyed by tenant, in the durable store (SQLite or PostgreSQL); shared by
the API and the workers. Redis holds only work in flight (the queue, leases, caches): see README "Durability".

One row per assessment (service/state/durable/records_store.py): meta, part cheap, provisional, part llm, final, the
tail's and the callbacks' states. Workers write one part each, once (a conditional UPDATE ... WHERE part IS NULL), so
parallel parts never overwrite each other and a redelivered job finds what is stored; ``final`` is written once and
``tail`` marks that everything after it (scores pooled, review items, callback job) has been done. ``provisional``
(also written once) is the cheap tier's result, published while the LLM tier still works. An Idempotency-Key is
claimed in the transaction that writes its assessment.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import msgspec
from redis.asyncio import Redis

from service.core.records import (
    AssessmentMeta,
    BatchMeta,
    CallbackEvent,
    CallbackState,
    CheapPart,
    FinalPart,
    LLMPart,
    Status,
    callback_events,
)
from service.platform.errors import Conflict, NotFound
from service.state.durable.packing import pack, unpack

__all__ = ["AssessmentState", "Store", "request_hash"]

logger = logging.getLogger("trisk.store")

T = TypeVar("T")


def request_hash(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass
class AssessmentState:
    """Everything stored about one assessment."""

    meta: AssessmentMeta
    cheap: CheapPart | None = None
    llm: LLMPart | None = None
    final: FinalPart | None = None
    started: bool = False
    failed: str | None = None
    callback: CallbackState | None = None
    tail_done: bool = False
    tail_error: str | None = None
    provisional: FinalPart | None = None
    cheap_callback: CallbackState | None = None

    @property
    def published(self) -> FinalPart | None:
        """The result a reader sees: the final one, else the cheap tier's provisional one."""
        return self.final if self.final is not None else self.provisional

    def callback_of(self, event: CallbackEvent) -> CallbackState | None:
        return self.callback if event == "final" else self.cheap_callback

    @property
    def status(self) -> Status:
        if self.failed is not None:
            return "failed"
        if self.final is not None:
            return "done"
        if self.provisional is not None:
            return "partial"
        if self.started or self.cheap is not None:
            return "running"
        return "pending"


class Store:
    """Typed access to the records of assessments and batches (the durable store), and the Redis client the review
    queue and pending adjudications still use (``redis``)."""

    def __init__(self, redis: Redis | None, *, retention_seconds: int, db: Any = None, quotas: Any = None) -> None:
        from service.state.durable.records_store import RecordStore

        # redis-py's stubs type commands as "Awaitable | value" for the sync/async union; we only use the async client
        self.redis: Any = redis
        self.ttl = retention_seconds if retention_seconds > 0 else None
        if db is None:  # the process's store for the environment's settings (tests, tools); the app passes its own
            from service.platform.settings import get_settings
            from service.state.durable import open_store

            db = open_store(get_settings().durable)
        self.db = db
        self.records = RecordStore(db)
        self.quotas = quotas  # a records_store.Quotas checked as submissions are written (the API's store)

    async def _run(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return await asyncio.to_thread(fn, *args, **kwargs)

    async def _submit(self, fn: Callable[..., T], *args: Any) -> T:
        """A submission's write: on the store's own submissions thread where it has one (SQLite), else as ``_run``."""
        pool = getattr(self.db, "submissions", None)
        if pool is None:
            return await self._run(fn, *args)
        call = functools.partial(contextvars.copy_context().run, fn, *args)  # the log context goes along
        return await asyncio.get_running_loop().run_in_executor(pool, call)

    # -- idempotency
    async def create_idempotent(self, meta: AssessmentMeta, key: str, body_sha: str) -> str | None:
        """Claim an Idempotency-Key and write the assessment in one transaction, so whoever sees the key also sees
        the assessment. Returns the id of the assessment the key already names when the same request was made
        before (nothing is written then); raises Conflict when the key was used for a different request."""
        claim = (meta.tenant, key, meta.id, body_sha)
        prior = await self._submit(self.records.create, [_row_of(meta)], None, claim, self.quotas)
        if prior is None:
            return None
        if prior.request_sha != body_sha:
            raise Conflict(
                f"Idempotency-Key {key!r} was already used with a different request body",
                extra={"assessment_id": prior.assessment_id},
            )
        return prior.assessment_id

    async def release_idempotency(self, tenant: str, key: str) -> None:
        await self._run(self.records.release_idempotency, tenant, key)

    # -- assessments
    async def create(self, meta: AssessmentMeta) -> None:
        await self._submit(self.records.create, [_row_of(meta)], None, None, self.quotas)

    async def create_many(self, metas: list[AssessmentMeta], batch: BatchMeta | None = None) -> None:
        """All or nothing: one transaction for every assessment of a batch (and the batch itself)."""
        brow = None
        if batch is not None:
            brow = {"tenant": batch.tenant, "id": batch.id, "created_at": batch.created_at, "meta": pack(batch)}
        await self._submit(self.records.create, [_row_of(m) for m in metas], brow, None, self.quotas)

    async def delete(self, tenant: str, aids: list[str], batch_id: str | None = None) -> None:
        """Undo a submission that could not be queued (nothing of it was acknowledged)."""
        await self._run(self.records.delete, tenant, aids, batch_id)

    async def forget_assessments(self, tenant: str, aids: list[str], batch_id: str | None = None) -> list[str]:
        """Delete a tenant's assessments (and a batch) for good: their rows, Idempotency-Keys and review items (the
        one place deletion and the purge go through). Verdicts stay (label, ids, snapshot of signals; no texts)."""
        return await self._run(self.records.delete, tenant, aids, batch_id)

    async def get(self, tenant: str, aid: str) -> AssessmentState:
        row = await self._run(self.records.get, tenant, aid)
        if row is None:
            raise NotFound(f"no assessment {aid!r}")
        return _state_of(row)

    async def get_many(self, tenant: str, aids: list[str]) -> list[AssessmentState | None]:
        rows = await self._run(self.records.get_many, tenant, aids)
        out: list[AssessmentState | None] = []
        for aid in aids:
            row = rows.get(aid)
            try:
                out.append(None if row is None else _state_of(row))
            except NotFound:
                out.append(None)
        return out

    async def exists(self, tenant: str, aid: str) -> bool:
        return await self._run(self.records.exists, tenant, aid)

    async def mark_started(self, tenant: str, aid: str) -> None:
        await self._run(self.records.mark_started, tenant, aid)

    async def put_cheap(self, tenant: str, aid: str, part: CheapPart) -> bool:
        """Write the cheap tier's part once; False when another delivery wrote it first."""
        return await self._run(self.records.put_once, tenant, aid, "cheap", pack(part))

    async def put_llm(self, tenant: str, aid: str, part: LLMPart) -> bool:
        """Write the LLM tier's part once; False when another delivery wrote it first."""
        return await self._run(self.records.put_once, tenant, aid, "llm", pack(part))

    async def put_final(self, tenant: str, aid: str, part: FinalPart) -> bool:
        """Write the final result once; False when another run of the job got there first (its result stands)."""
        return await self._run(self.records.put_once, tenant, aid, "final", pack(part))

    async def llm_started_at(self, tenant: str, aid: str) -> float:
        """When the LLM tier of this assessment first started (written once: every try counts from it)."""
        return await self._run(self.records.llm_started_at, tenant, aid)

    async def put_provisional(self, tenant: str, aid: str, part: FinalPart) -> bool:
        """Publish the cheap tier's result once; False when another delivery published it first."""
        return await self._run(self.records.put_once, tenant, aid, "provisional", pack(part))

    async def get_final(self, tenant: str, aid: str) -> FinalPart | None:
        row = await self._run(self.records.get, tenant, aid)
        return None if row is None or row.final is None else unpack(row.final, FinalPart)

    async def mark_tail_done(self, tenant: str, aid: str) -> None:
        await self._run(self.records.mark, tenant, aid, tail_done_at=time.time())

    async def mark_tail_failed(self, tenant: str, aid: str, reason: str) -> None:
        """The result stands, but what follows it (review items, callback) could not be done: say so."""
        await self._run(self.records.mark, tenant, aid, tail_error=reason)

    async def mark_failed(self, tenant: str, aid: str, reason: str) -> None:
        await self._run(self.records.mark, tenant, aid, failed=reason)

    async def put_callback(self, tenant: str, aid: str, state: CallbackState, event: CallbackEvent = "final") -> bool:
        """Record a callback's state; False when it reads delivered already (a delivered state is never replaced)."""
        return await self._run(self.records.put_callback, tenant, aid, event, pack(state), state.status)

    async def open_callback(self, tenant: str, aid: str, url: str, event: CallbackEvent) -> None:
        """The pending state of a callback the worker is about to queue (kept when it exists: jobs are re-run)."""
        await self._run(self.records.open_callback, tenant, aid, event, pack(CallbackState(url=url)))

    # -- budget reference: scores seen per model version
    async def record_scores(self, tenant: str, aid: str, by_rule: dict[str, list[float]]) -> bool:
        """Add an assessment's unforced scores (per model version) to the tenant's pool, once per assessment."""
        return await self._run(self.records.record_scores, tenant, aid, by_rule)

    async def seen_counts(self, tenant: str, rule: str, scores: list[float]) -> tuple[int, list[int]]:
        """How many scores this tenant has seen for a model version, and how many of them lie at or below each."""
        return await self._run(self.records.seen_counts, tenant, rule, scores)

    # -- batches
    async def get_batch(self, tenant: str, bid: str) -> BatchMeta:
        raw = await self._run(self.records.get_batch, tenant, bid)
        if raw is None:
            raise NotFound(f"no batch {bid!r}")
        batch: BatchMeta = unpack(raw, BatchMeta)
        return batch

    async def export(self, tenant: str, since: float, until: float) -> AsyncIterator[AssessmentState]:
        """A tenant's assessments created in [since, until), oldest first, a page read at a time."""
        pages = self.records.export(tenant, since, until)
        done = object()
        while True:
            row = await self._run(next, pages, done)
            if row is done:
                return
            try:
                yield _state_of(row)
            except NotFound:
                continue


def _row_of(meta: AssessmentMeta) -> dict[str, Any]:
    """The new row of an assessment; the final callback's pending state is written with it when asked for."""
    row: dict[str, Any] = {
        "tenant": meta.tenant,
        "id": meta.id,
        "batch_id": meta.batch_id,
        "created_at": meta.created_at,
        "candidates": len(meta.request.candidates),
        "meta": pack(meta),
    }
    if "final" in callback_events(meta.request):
        row["callback"] = pack(CallbackState(url=str(meta.request.callback_url)))
        row["callback_status"] = "pending"
    return row


def _opt(blob: bytes | None, type_: type[T]) -> T | None:
    return None if blob is None else unpack(blob, type_)


def _state_of(row: Any) -> AssessmentState:
    try:
        return AssessmentState(
            meta=unpack(row.meta, AssessmentMeta),
            cheap=_opt(row.cheap, CheapPart),
            llm=_opt(row.llm, LLMPart),
            final=_opt(row.final, FinalPart),
            started=row.started_at is not None,
            failed=row.failed,
            callback=_opt(row.callback, CallbackState),
            tail_done=row.tail_done_at is not None,
            tail_error=row.tail_error,
            provisional=_opt(row.provisional, FinalPart),
            cheap_callback=_opt(row.callback_cheap, CallbackState),
        )
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        # written by an older version of the service: report it as unreadable rather than answering 500
        raise NotFound(f"assessment stored in an older format that this version cannot read ({exc})") from exc
