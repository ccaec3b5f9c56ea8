"""The store is the record, Redis only the work in flight: every ``TRISK_RECONCILE_SECONDS`` a worker re-queues the
jobs of unfinished records whose jobs Redis no longer holds (a Redis that restarted without its data, a FLUSHALL, an
evicted key), and every ``TRISK_PURGE_SECONDS`` it deletes the records older than ``TRISK_RETENTION_SECONDS``.

Re-queueing is idempotent: each job has its fixed id (the API's and the workers' own), a record whose job is queued,
waiting for a retry or running is left alone, and the jobs themselves redo only what is not stored. One worker at a
time does each round (a Redis lock with the period as its lifetime); the others skip it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

from arq.constants import in_progress_key_prefix, job_key_prefix, result_key_prefix

from service.companions import judge_jobs
from service.core.records import AssessmentMeta
from service.review import adjudication_jobs
from service.state import lanes
from service.state.durable.packing import unpack
from service.state.store import Store
from workers.context import WorkerContext

__all__ = ["Plan", "jobs_of", "purge_once", "reconcile_once", "run_periodic"]

logger = logging.getLogger("trisk.reconcile")
_PAGE = 500
_LOCK = "trisk:reconcile:{queue}:{what}"


@dataclass(frozen=True)
class Plan:
    """A job to queue again: function, job id, the extra arguments after (tenant, id)."""

    function: str
    job_id: str
    args: tuple[Any, ...] = ()


def jobs_of(row: Any) -> tuple[list[str], list[Plan]]:
    """For an unfinished assessment row: the job ids whose presence in Redis means it is being worked on, and the
    jobs to queue when none of them is there."""
    aid = row.id
    meta: AssessmentMeta = unpack(row.meta, AssessmentMeta)
    work_left = row.failed is None and row.tail_done_at is None and row.tail_error is None
    watch: list[str] = []
    plans: list[Plan] = []
    if work_left:
        watch += [f"{aid}:cheap", f"{aid}:llm"]
        if row.cheap is not None and "llm" in meta.parts and row.final is None:
            plans.append(Plan("assess_llm", f"{aid}:llm"))
        else:  # the cheap job also finalizes, and runs the tail, from whatever is stored
            plans.append(Plan("assess_cheap", f"{aid}:cheap"))
    elif row.failed is not None:
        return watch, plans  # a failed assessment sends no callback
    elif row.callback_status == "pending":
        watch.append(f"{aid}:callback")
        plans.append(Plan("deliver_callback", f"{aid}:callback"))
    if row.callback_cheap_status == "pending":
        watch.append(f"{aid}:callback:cheap")
        plans.append(Plan("deliver_callback", f"{aid}:callback:cheap", ("cheap",)))
    return watch, plans


async def _held(pool: Any, job_ids: list[str]) -> list[bool]:
    """Whether Redis holds each job (queued, deferred for a retry, or running)."""
    async with pool.pipeline(transaction=False) as pipe:
        for jid in job_ids:
            pipe.exists(job_key_prefix + jid, in_progress_key_prefix + jid)
        found = await pipe.execute()
    return [bool(n) for n in found]


async def _forget_results(pool: Any, job_ids: list[str]) -> None:
    """Drop what ARQ kept of these jobs' last runs: a job that ended without finishing its record (its last try failed
    while the store was away and could not record the failure, say) leaves a result for an hour, and ARQ refuses a job
    id that has one, so queueing it again would do nothing while the record waits."""
    await pool.delete(*(result_key_prefix + jid for jid in job_ids))


async def reconcile_once(store: Store, pool: Any, *, older_than: float) -> int:
    """Queue again the jobs of every unfinished record created before ``older_than`` that Redis does not hold; the
    number of jobs queued."""
    queued = 0
    after: tuple[float, str, str] | None = None
    while True:
        rows = await asyncio.to_thread(store.records.unfinished, older_than, after, _PAGE)
        for row in rows:
            watch, plans = jobs_of(row)
            if not plans or any(await _held(pool, watch)):
                continue
            meta = unpack(row.meta, AssessmentMeta)
            await _forget_results(pool, [plan.job_id for plan in plans])
            for plan in plans:
                await lanes.enqueue_follow_on(pool, plan.function, meta, *plan.args, job_id=plan.job_id)
                queued += 1
        if len(rows) < _PAGE:
            break
        last = rows[-1]
        after = (last.created_at, last.tenant, last.id)
    for job in await asyncio.to_thread(store.records.unfinished_judge_jobs, older_than, 10_000):
        args: tuple[str, ...]
        if job.kind == adjudication_jobs.KIND:
            function, job_id, args = "adjudicate", adjudication_jobs.job_id_of(job.id), (job.id,)
        else:
            function, job_id, args = "judge", judge_jobs.job_id_of(job.kind, job.id), (job.kind, job.id)
        if not (await _held(pool, [job_id]))[0]:
            await _forget_results(pool, [job_id])
            await lanes.enqueue(pool, function, job.tenant, *args, job_id=job_id, lane="interactive")
            queued += 1
    if queued:
        logger.warning("reconciled: %d jobs queued again for unfinished records Redis did not hold", queued)
    return queued


async def purge_once(store: Store, retention_seconds: int) -> int:
    """Delete the records older than the retention (batched), with their review items; the assessments removed."""
    if retention_seconds <= 0:
        return 0
    gone = await asyncio.to_thread(store.records.purge, time.time() - retention_seconds)
    if gone.count or gone.batches or gone.judge_jobs:
        logger.info("purged %d assessments, %d batches, %d judge jobs", gone.count, gone.batches, gone.judge_jobs)
    return gone.count


async def _locked(pool: Any, key: str, seconds: float) -> bool:
    return bool(await pool.set(key, b"1", nx=True, px=max(1, int(seconds * 1000))))


async def run_periodic(worker: WorkerContext) -> None:
    """The worker's background loop: reconcile and purge, each at its period, one worker per round."""
    settings = worker.settings
    pool = worker.pool
    period = settings.jobs.reconcile_seconds
    purge_period = settings.jobs.purge_seconds
    queue = settings.redis.queue_name
    next_reconcile = time.monotonic() + period
    next_purge = time.monotonic() + min(purge_period, 60.0)
    while True:
        now = time.monotonic()
        wake = min(t for t, p in ((next_reconcile, period), (next_purge, purge_period)) if p > 0)
        await asyncio.sleep(max(0.0, wake - now))
        try:
            if period > 0 and time.monotonic() >= next_reconcile:
                next_reconcile = time.monotonic() + period
                if await _locked(pool, _LOCK.format(queue=queue, what="reconcile"), period * 0.9):
                    # a record younger than a period may still be on its way into the queue (the API enqueues it
                    # right after the write): its job is queued with the same id either way
                    await reconcile_once(worker.store, pool, older_than=time.time() - period)
            if purge_period > 0 and time.monotonic() >= next_purge:
                next_purge = time.monotonic() + purge_period
                if await _locked(pool, _LOCK.format(queue=queue, what="purge"), purge_period * 0.9):
                    await purge_once(worker.store, settings.redis.retention_seconds)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # Redis or the store away: the next round tries again
            logger.warning("reconcile/purge round failed, next one tries again: %s: %s", type(exc).__name__, exc)
