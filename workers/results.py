"""An assessment's results on a worker: the provisional one (the cheap tier's, while the LLM tier works), the final
one, written once each, and the tail after the final write (scores pooled for the budget rank, review items, the
callback jobs), each step safe to repeat."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from service.core.budget import SeenScores
from service.core.pipeline import final_part, final_risks
from service.core.records import FinalPart
from service.state.store import AssessmentState
from workers.callback_jobs import queue_callback
from workers.context import WorkerContext
from workers.llm_tier import LLMStop, stopped_part
from workers.policy import reason as reason_of

__all__ = ["end_with_cheap", "finalize", "publish_cheap", "stop_llm_tier"]

logger = logging.getLogger("trisk.workers")


async def _scored(w: WorkerContext, state: AssessmentState) -> FinalPart:
    """Risk, budget rank and flags of every candidate from what is stored (the cheap tier, and the LLM tier when
    it is there), ranked against the tenant's pool of scores (read, not added to)."""
    assert state.cheap is not None
    meta = state.meta
    registry, model_name = await asyncio.to_thread(w.catalog.active_model, meta.tenant)
    scored = final_risks(meta.request.candidates, state.cheap, state.llm, registry, model_name)
    seen: dict[str, SeenScores] = {}
    for rule in sorted({sc.result.rule for sc in scored.values()}):
        scores = [scored[c.id].result.score for c in meta.request.candidates]
        total, below = await w.store.seen_counts(meta.tenant, rule, scores)
        seen[rule] = SeenScores(total, below)
    return final_part(meta.request.candidates, state.cheap, scored, seen)


async def publish_cheap(w: WorkerContext, state: AssessmentState) -> None:
    """Publish the cheap tier's result while the LLM tier works (status partial): written once, then its candidates
    join the review queue (kept as they are when already there) and the cheap callback is queued when asked for."""
    from service.review import enqueue_for_review

    meta = state.meta
    if state.final is not None:
        return
    if state.provisional is None:
        part = await _scored(w, state)
        if not await w.store.put_provisional(meta.tenant, meta.id, part):
            part = (await w.store.get(meta.tenant, meta.id)).provisional or part
        state.provisional = part
    await enqueue_for_review(w.catalog.db, meta.tenant, state, retention_seconds=w.settings.redis.retention_seconds)
    await queue_callback(w, state, "cheap")


async def finalize(w: WorkerContext, state: AssessmentState) -> None:
    """The final part (risk, budget rank, flags), written once; then the tail, which any delivery may repeat."""
    assert state.cheap is not None
    meta = state.meta
    if state.final is None:
        part = await _scored(w, state)
        if not await w.store.put_final(meta.tenant, meta.id, part):
            part = await w.store.get_final(meta.tenant, meta.id) or part  # another delivery finished first
        state.final = part
    if not state.tail_done:
        await _tail(w, state)
        await w.store.mark_tail_done(meta.tenant, meta.id)
        state.tail_done = True


async def _tail(w: WorkerContext, state: AssessmentState) -> None:
    """Everything after the final write, each step idempotent: the unforced scores join the tenant's pool (once per
    assessment, marked in its row), the candidates join the review queue (HSETNX), the callback job is queued (a fixed
    job id)."""
    from service.review import enqueue_for_review

    assert state.final is not None
    meta = state.meta
    unforced: dict[str, list[float]] = {}
    for row in state.final.candidates.values():
        if row.risk.forced_severity is None:
            unforced.setdefault(row.risk.rule, []).append(row.risk.score)
    await w.store.record_scores(meta.tenant, meta.id, unforced)
    # the final result replaces what the cheap tier put in the queue (priority, snapshot); verdicts stay
    await enqueue_for_review(
        w.catalog.db, meta.tenant, state, retention_seconds=w.settings.redis.retention_seconds, refresh=True
    )
    await queue_callback(w, state, "final")
    if state.llm is None or state.llm.status == "skipped":
        # no LLM tier ran, so no cheap result was published before: a caller who asked for it gets it now
        await queue_callback(w, state, "cheap")


async def end_with_cheap(
    w: WorkerContext, state: AssessmentState, status: LLMStop, reason: str, guard: Any = None
) -> None:
    """Write the stopped LLM part (once) and finalize from the cheap tier; raises what fails, for the caller to retry
    or record (``stop_llm_tier`` is the form that never raises)."""
    meta = state.meta
    if state.final is None and state.llm is None:
        part = stopped_part(w, state, status, reason, guard)
        if not await w.store.put_llm(meta.tenant, meta.id, part):
            part = (await w.store.get(meta.tenant, meta.id)).llm or part
        state.llm = part
    await finalize(w, state)


async def stop_llm_tier(
    w: WorkerContext, state: AssessmentState, status: LLMStop, reason: str, guard: Any = None
) -> bool:
    """End an assessment whose LLM tier cannot finish with its cheap-tier result and the reason; False when there
    is no cheap result to end with (or Redis refuses even that: then the caller records the failure)."""
    if state.cheap is None or "llm" not in state.meta.parts:
        return False
    try:
        await end_with_cheap(w, state, status, reason, guard)
    except Exception as exc:
        logger.error("assessment %s: could not end with the cheap result: %s", state.meta.id, reason_of(exc))
        return False
    return True
