"""Assessment jobs: ``assess_cheap`` (the cheap tier, then the LLM job or the final result) and ``assess_llm`` (the
judge cascade, then the final result).

Delivery is at least once, so every job is idempotent as a whole: it re-reads what is stored and does only what is
missing. Each part is written once (``part:cheap``, ``provisional``, ``part:llm``, ``final``: HSETNX; a second
delivery that loses the race reads the winner's part). Whenever the final part exists, the tail runs (scores pooled
for the budget rank, review items, the callback job), each step safe to repeat, until ``tail`` is marked done; a
failure after the final write never marks the assessment failed.

Answers first: when the LLM tier is to run, the cheap job publishes the cheap tier's result at once (``provisional``:
risk, flags, budget rank; status ``partial``), puts its candidates in the review queue and queues the cheap callback
when asked for. The LLM job is bounded by ``TRISK_LLM_DEADLINE_SECONDS`` (every judge call shares it) and whatever
ends it (the deadline, ARQ's job timeout, a cancellation, a failure on the last try, a lost worker) leaves a final
result: the cheap tier's risk with the reason the LLM tier stopped (``part:llm`` with status timed_out or failed).

Failures follow the one policy of workers/policy.py; the last try ends the LLM tier with the cheap result where there
is one, and marks the assessment failed where there is none.
"""

from __future__ import annotations

import logging
from typing import Any

from arq import Retry

from service.core.judges.llm import NO_PROVIDER
from service.platform.errors import NotFound
from service.platform.telemetry import CHECK_FAILURES
from service.state import lanes
from service.state.store import AssessmentState
from workers.cheap_tier import run_cheap
from workers.context import WorkerContext
from workers.llm_tier import llm_guard, run_llm_tier
from workers.policy import JOB_POLICY, TAIL_POLICY, guarded, observed, reason
from workers.results import end_with_cheap, finalize, publish_cheap, stop_llm_tier

__all__ = ["assess_cheap", "assess_llm"]

logger = logging.getLogger("trisk.workers")


async def _work_left(w: WorkerContext, tenant: str, aid: str) -> AssessmentState | str:
    """The assessment as stored, or what a job that finds nothing to do returns."""
    try:
        state = await w.store.get(tenant, aid)
    except NotFound:
        return "gone"  # expired or rolled back before the job ran
    if state.failed is not None:
        return "failed earlier"
    if state.tail_done:
        return "already finished"
    return state


async def _gave_up(w: WorkerContext, tries: int, state: AssessmentState) -> bool:
    """A delivery beyond the last try (its worker was lost): the LLM tier ends with the cheap result, or the
    assessment reads failed."""
    if not JOB_POLICY.lost(tries):
        return False
    if state.final is None and not await stop_llm_tier(w, state, "failed", JOB_POLICY.gave_up):
        await w.store.mark_failed(state.meta.tenant, state.meta.id, JOB_POLICY.gave_up)
    return True


async def _on_failure(w: WorkerContext, tries: int, state: AssessmentState, exc: Exception) -> str:
    """Retry what may pass (transient errors, or anything once the result is written: only the tail is left);
    otherwise, or on the last try, record the failure where the client sees it."""
    meta = state.meta
    final = state.final
    if final is None:
        try:
            final = await w.store.get_final(meta.tenant, meta.id)
        except Exception:  # Redis itself is failing: decide on what we know
            final = None
    CHECK_FAILURES.labels("tail" if final is not None else ("llm" if state.cheap is not None else "cheap")).inc()
    why = reason(exc)
    if final is not None:
        if TAIL_POLICY.retries(exc, tries):
            logger.warning("assessment %s: tail failed on try %s, retrying: %s", meta.id, tries, why)
        TAIL_POLICY.retry(exc, tries, w.retry_delay)
        logger.error("assessment %s: tail failed on the last try: %s", meta.id, why)
        await w.store.mark_tail_failed(meta.tenant, meta.id, why)
        return "done; tail failed"
    if JOB_POLICY.retries(exc, tries):
        logger.warning("assessment %s: try %s failed, retrying: %s", meta.id, tries, why)
    JOB_POLICY.retry(exc, tries, w.retry_delay)
    if await stop_llm_tier(w, state, "failed", why):
        logger.error("assessment %s: LLM tier failed on try %s, cheap result final: %s", meta.id, tries, why)
        return "done; llm tier failed"
    logger.error("assessment %s failed on try %s: %s", meta.id, tries, why)
    await w.store.mark_failed(meta.tenant, meta.id, why)
    return "failed"


async def _queue_llm(w: WorkerContext, meta: Any) -> None:
    """Queue the assessment's LLM job (one fixed job id: queueing it again while it waits or runs adds nothing)."""
    await lanes.enqueue_follow_on(w.pool, "assess_llm", meta, job_id=f"{meta.id}:llm")


@observed("assess_cheap")
async def assess_cheap(w: WorkerContext, tries: int, tenant: str, aid: str) -> str:
    state = await _work_left(w, tenant, aid)
    if isinstance(state, str):
        return state
    if state.cheap is not None and "llm" in state.meta.parts and JOB_POLICY.lost(tries):
        # the cheap part is stored and the LLM job may be healthy: hand over to it (it ends the assessment either way)
        await _queue_llm(w, state.meta)
        return "gave up; llm queued"
    if await _gave_up(w, tries, state):
        return "gave up"
    return await guarded(
        _cheap(w, state),
        limit=w.cheap_job_timeout,
        on_timeout=lambda: _cheap_timed_out(w, state),
        on_failure=lambda exc: _on_failure(w, tries, state, exc),
    )


async def _cheap(w: WorkerContext, state: AssessmentState) -> str:
    tenant, aid = state.meta.tenant, state.meta.id
    if state.final is None:
        if state.cheap is None:
            await w.store.mark_started(tenant, aid)
            part = await run_cheap(w, state)
            if not await w.store.put_cheap(tenant, aid, part):
                part = (await w.store.get(tenant, aid)).cheap or part  # another delivery wrote it first
            state.cheap = part
        if "llm" in state.meta.parts:
            if w.llm is None:
                # this worker holds no provider (the one place that decides): the tier reads skipped, and the
                # cheap result is the final one
                await end_with_cheap(w, state, "skipped", NO_PROVIDER)
                return "done; llm skipped"
            await publish_cheap(w, state)
            await _queue_llm(w, state.meta)
            return "cheap done; llm queued"
    await finalize(w, state)
    return "done"


async def _cheap_timed_out(w: WorkerContext, state: AssessmentState) -> None:
    """A cheap job stopped by ARQ's timeout: failed with the reason before the cheap part exists; after it, the rest
    is handed on (the LLM job, or the final write), since ARQ does not run a timed-out job again."""
    meta = state.meta
    try:
        if state.cheap is None:
            await w.store.mark_failed(meta.tenant, meta.id, "the cheap tier was stopped by its job timeout")
        elif "llm" in meta.parts:
            await _queue_llm(w, meta)
        else:
            await finalize(w, state)
    except Exception as exc:
        logger.error("assessment %s: could not record the cheap job's timeout: %s", meta.id, reason(exc))


class _LLMRun:
    """One try of the LLM tier: its guard (the deadline and the judges' costs so far) once it has one."""

    guard: Any = None


@observed("assess_llm")
async def assess_llm(w: WorkerContext, tries: int, tenant: str, aid: str) -> str:
    state = await _work_left(w, tenant, aid)
    if isinstance(state, str):
        return state
    if state.cheap is None:
        raise Retry(defer=2)  # the cheap part is not stored yet (should not happen: it enqueues us)
    if await _gave_up(w, tries, state):
        return "gave up"
    run = _LLMRun()

    async def timed_out() -> None:
        # ARQ's job timeout: end with the cheap result and the reason, never running for good. A worker shutdown
        # instead leaves the job to ARQ, which runs it again (a worker lost too often ends in _gave_up).
        await stop_llm_tier(w, state, "timed_out", "the LLM job was stopped by its job timeout", run.guard)

    return await guarded(
        _llm(w, state, run),
        limit=w.llm_job_timeout,
        deadline=w.settings.llm.deadline_seconds,
        on_timeout=timed_out,
        on_failure=lambda exc: _on_failure(w, tries, state, exc),
    )


async def _llm(w: WorkerContext, state: AssessmentState, run: _LLMRun) -> str:
    tenant, aid = state.meta.tenant, state.meta.id
    if w.llm is None and state.final is None and state.llm is None:
        # queued by a worker with a provider, taken by one without: this one cannot judge, so the tier reads
        # skipped (a store or Redis that fails meanwhile is retried like any other failure)
        await end_with_cheap(w, state, "skipped", NO_PROVIDER)
        return "done; llm skipped"
    if state.final is None and state.llm is None:
        run.guard = await llm_guard(w, state)
        part = await run_llm_tier(w, state, run.guard)
        if not await w.store.put_llm(tenant, aid, part):
            part = (await w.store.get(tenant, aid)).llm or part
        state.llm = part
    await finalize(w, state)
    return "done"
