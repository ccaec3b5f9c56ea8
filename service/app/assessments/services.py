"""Accepting assessments: validation (clear 4xx, nothing half-written), novelty, storage, enqueueing."""

from __future__ import annotations

import asyncio
import time
import uuid

from service.app.deps import JobQueue
from service.app.novelty.services import check_text
from service.app.resources import Resources
from service.core.novelty_report import NoveltyPending, SourceNovelty, source_novelty
from service.core.records import ALL_CHECKS, DEFAULT_CHECKS, LLM_CHECKS, AssessmentMeta, AssessmentRequest, BatchMeta
from service.core.text import get_normaliser
from service.platform.callbacks import CallbackRefused, check_url, check_url_resolves
from service.platform.errors import InputError, NotReady, TriskError, Unavailable
from service.platform.redis_client import REDIS_UNAVAILABLE
from service.platform.settings import Settings
from service.state import lanes
from service.state.store import AssessmentState, Store

__all__ = ["CHEAP_JOB", "accept_assessment", "accept_batch", "validate_request"]

CHEAP_JOB = "assess_cheap"


def validate_request(settings: Settings, req: AssessmentRequest, where: str = "") -> list[str]:
    """Raise a clear InputError for anything wrong; return the checks to run."""
    limits = settings.limits
    at = f"{where}" if where else ""
    check_text(req.source.text, field=f"{at}source.text", max_chars=limits.max_text_chars)
    get_normaliser(req.source.lang)
    get_normaliser(req.target_lang)
    if not req.candidates:
        raise InputError(f"{at}candidates is empty; send at least one candidate translation")
    if len(req.candidates) > limits.max_candidates:
        raise InputError(
            f"{at}candidates has {len(req.candidates)} items; the limit is {limits.max_candidates} per passage "
            "(TRISK_MAX_CANDIDATES)",
            extra={"limit": limits.max_candidates},
        )
    seen: set[str] = set()
    for i, c in enumerate(req.candidates):
        if not c.id or not c.id.strip():
            raise InputError(f"{at}candidates[{i}].id is empty")
        if len(c.id) > 200:
            raise InputError(f"{at}candidates[{i}].id is longer than 200 characters")
        if c.id in seen:
            raise InputError(f"{at}candidates[{i}].id {c.id!r} is a duplicate; candidate ids must be unique")
        seen.add(c.id)
        check_text(c.text, field=f"{at}candidates[{i}].text", max_chars=limits.max_text_chars)
    checks = list(DEFAULT_CHECKS) if req.checks is None else list(dict.fromkeys(req.checks))
    unknown = [c for c in checks if c not in ALL_CHECKS]
    if unknown:
        raise InputError(
            f"{at}unknown checks {unknown}; known: {list(ALL_CHECKS)}", extra={"known_checks": list(ALL_CHECKS)}
        )
    if not checks:
        raise InputError(f"{at}checks is empty; omit it for the default set")
    if req.callback_url is not None:
        try:
            check_url(req.callback_url, settings.jobs.callback_policy)
        except CallbackRefused as exc:
            raise CallbackRefused(f"{at}{exc.detail}", extra={"field": f"{at}callback_url"}) from exc
    if req.callback_events is not None and (not req.callback_events or req.callback_url is None):
        raise InputError(f"{at}callback_events needs a callback_url and at least one event (cheap, final)")
    if req.review_budget is not None and not 0.0 < req.review_budget <= 1.0:
        raise InputError(f"{at}review_budget must be in (0, 1]")
    if req.max_llm_calls is not None and req.max_llm_calls < 0:
        raise InputError(f"{at}max_llm_calls must be >= 0")
    return checks


async def _callbacks_resolve(settings: Settings, reqs: list[AssessmentRequest], where: str = "") -> None:
    """The callback hosts resolve, to addresses the policy allows (after every other check: a bad request costs no
    lookup)."""
    urls = [(f"{where.format(i)}callback_url", r.callback_url) for i, r in enumerate(reqs) if r.callback_url]
    if urls:
        await check_url_resolves(urls, settings.jobs.callback_policy)


def _meta(
    settings: Settings,
    tenant: str,
    req: AssessmentRequest,
    checks: list[str],
    novelty: SourceNovelty,
    index_signature: str | None,
    *,
    idempotency_key: str | None = None,
    batch_id: str | None = None,
) -> AssessmentMeta:
    # the worker decides whether the LLM tier runs (it holds the provider): the API records that it was asked for
    llm = any(c in LLM_CHECKS for c in checks)
    return AssessmentMeta(
        id=uuid.uuid4().hex,
        tenant=tenant,
        created_at=time.time(),
        request=req,
        checks=checks,
        novelty=novelty,
        parts=["cheap", "llm"] if llm else ["cheap"],
        index_signature=index_signature,
        idempotency_key=idempotency_key,
        batch_id=batch_id,
    )


async def _enqueue(jobs: JobQueue, tenant: str, aids: list[str], metas: list[AssessmentMeta]) -> None:
    """The cheap-tier jobs in the assessments' lane, each at the tenant's fair share (``service.state.lanes``)."""
    items = [((aid,), f"{aid}:cheap", lanes.cost_of(m)) for aid, m in zip(aids, metas, strict=True)]
    await jobs.enqueue_many(CHEAP_JOB, tenant, items, lane=lanes.lane_of_meta(metas[0]))


async def accept_assessment(
    resources: Resources,
    store: Store,
    jobs: JobQueue,
    tenant: str,
    req: AssessmentRequest,
    body_sha: str,
    idempotency_key: str | None,
) -> tuple[AssessmentState, bool]:
    """Validate, compute the source's novelty (off the event loop), store and enqueue; returns the state and whether
    this replays an earlier identical request (whose job is queued again: a no-op unless it was lost)."""
    settings = resources.settings
    checks = validate_request(settings, req)
    await _callbacks_resolve(settings, [req])
    novelty, signature = await asyncio.to_thread(source_novelty, resources.indexes, req.source.text, req.source.lang)
    meta = _meta(settings, tenant, req, checks, novelty, signature, idempotency_key=idempotency_key)
    try:
        if idempotency_key:
            prior = await store.create_idempotent(meta, idempotency_key, body_sha)
            if prior is not None:
                await _enqueue(jobs, tenant, [prior], [meta])  # the same body, so the same lane and cost
                return await store.get(tenant, prior), True
        else:
            await store.create(meta)
        await _enqueue(jobs, tenant, [meta.id], [meta])
    except TriskError as exc:
        if exc.status_code < 500:
            raise
        await _rollback(store, tenant, [meta.id], None, idempotency_key)
        if isinstance(exc, Unavailable):
            raise  # a 503 with Retry-After as it is
        raise NotReady(f"could not queue the assessment: {exc.detail}") from exc
    except REDIS_UNAVAILABLE:
        # Redis went away between the write and the enqueue: undo what still can be, answer the one 503 for it
        await _rollback(store, tenant, [meta.id], None, idempotency_key)
        raise
    except (OSError, ConnectionError) as exc:
        await _rollback(store, tenant, [meta.id], None, idempotency_key)
        raise NotReady(f"could not queue the assessment: {exc}") from exc
    return AssessmentState(meta=meta), False


async def _rollback(store: Store, tenant: str, aids: list[str], batch_id: str | None, idem: str | None) -> None:
    try:
        await store.delete(tenant, aids, batch_id)
        if idem:
            await store.release_idempotency(tenant, idem)
    except Exception:  # Redis is gone: nothing was acknowledged to the client, the keys expire with retention
        pass


async def accept_batch(
    settings: Settings, store: Store, jobs: JobQueue, tenant: str, items: list[AssessmentRequest]
) -> BatchMeta:
    """Validate every item first; then store all of them and the batch in one transaction, then enqueue. The items'
    novelty is left to the workers (about 20 ms of CPU per text would hold the API for minutes on a large batch)."""
    limits = settings.limits
    if not items:
        raise InputError("the batch has no items")
    if len(items) > limits.max_batch_items:
        raise InputError(
            f"the batch has {len(items)} items; the limit is {limits.max_batch_items} (TRISK_MAX_BATCH_ITEMS)"
        )
    checks = [validate_request(settings, req, where=f"items[{i}].") for i, req in enumerate(items)]
    await _callbacks_resolve(settings, items, where="items[{}].")
    batch_id = uuid.uuid4().hex
    pending = NoveltyPending()
    metas = [
        _meta(settings, tenant, req, ch, pending, None, batch_id=batch_id)
        for req, ch in zip(items, checks, strict=True)
    ]
    batch = BatchMeta(id=batch_id, tenant=tenant, created_at=time.time(), assessment_ids=[m.id for m in metas])
    try:
        await store.create_many(metas, batch)
        await _enqueue(jobs, tenant, batch.assessment_ids, metas)
    except REDIS_UNAVAILABLE:
        await _rollback(store, tenant, batch.assessment_ids, batch_id, None)
        raise
    except (TriskError, OSError, ConnectionError) as exc:
        if isinstance(exc, TriskError) and exc.status_code < 500:
            raise  # refused as it was (a quota): nothing was written
        await _rollback(store, tenant, batch.assessment_ids, batch_id, None)
        raise NotReady(f"could not queue the batch: {exc}") from exc
    return batch
