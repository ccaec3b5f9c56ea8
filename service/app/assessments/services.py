"""Accepting assessments: validation (clear 4xx, nothing half-written), synchronous novelty, storage, enqueueing."""

from __future__ import annotations

import time
import uuid
from typing import Any
from urllib.parse import urlparse

import msgspec

from service.app.novelty.services import check_text
from service.app.resources import Resources
from service.core.errors import InputError, NotReady, TriskError
from service.core.records import ALL_CHECKS, DEFAULT_CHECKS, LLM_CHECKS, AssessmentMeta, AssessmentRequest, BatchMeta
from service.core.store import AssessmentState, Store
from service.core.text import get_normaliser

__all__ = ["accept_assessment", "accept_batch", "enqueue_cheap", "store_of", "validate_request"]

CHEAP_JOB = "assess_cheap"


def store_of(resources: Resources) -> Store:
    if resources.redis is None:
        raise NotReady("Redis is not connected")
    return Store(resources.redis, retention_seconds=resources.settings.redis.retention_seconds)


def validate_request(resources: Resources, req: AssessmentRequest, where: str = "") -> list[str]:
    """Raise a clear InputError for anything wrong; return the checks to run."""
    limits = resources.settings.limits
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
        url = urlparse(req.callback_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise InputError(f"{at}callback_url must be an absolute http(s) URL")
    if req.review_budget is not None and not 0.0 < req.review_budget <= 1.0:
        raise InputError(f"{at}review_budget must be in (0, 1]")
    if req.max_llm_calls is not None and req.max_llm_calls < 0:
        raise InputError(f"{at}max_llm_calls must be >= 0")
    return checks


def novelty_for(resources: Resources, req: AssessmentRequest) -> tuple[dict[str, Any], str | None]:
    """The source's novelty, or a visible skip (no index for the language, no content words)."""
    from service.app.novelty.services import to_out

    lang = get_normaliser(req.source.lang).lang
    index = resources.indexes.get(lang)
    if index is None:
        reason = f"no novelty index for language {lang!r}" if resources.indexes else "no novelty index loaded"
        return {"status": "skipped", "reason": reason}, None
    try:
        result = index.score(req.source.text)
    except InputError as exc:
        return {"status": "skipped", "reason": exc.detail}, index.signature_id
    out = msgspec.to_builtins(to_out(result, index))
    out.pop("signature", None)
    return {"status": "value", **out}, index.signature_id


def _meta(resources: Resources, tenant: str, req: AssessmentRequest, checks: list[str], **kw: Any) -> AssessmentMeta:
    novelty, sig = novelty_for(resources, req)
    llm = any(c in LLM_CHECKS for c in checks) and resources.settings.llm.configured
    return AssessmentMeta(
        id=uuid.uuid4().hex,
        tenant=tenant,
        created_at=time.time(),
        request=req,
        checks=checks,
        novelty=novelty,
        parts=["cheap", "llm"] if llm else ["cheap"],
        index_signature=sig,
        **kw,
    )


async def enqueue_cheap(resources: Resources, tenant: str, aids: list[str]) -> None:
    if resources.queue is None:
        from service.app.resources import open_queue

        resources.queue = await open_queue(resources.settings)
    if resources.queue is None:
        raise NotReady("the job queue is not connected")
    for aid in aids:
        # the job id makes enqueueing idempotent: a replayed request never runs the cheap tier twice
        await resources.queue.enqueue_job(CHEAP_JOB, tenant, aid, _job_id=f"{aid}:cheap")


async def accept_assessment(
    resources: Resources, tenant: str, req: AssessmentRequest, body_sha: str, idempotency_key: str | None
) -> tuple[AssessmentState, bool]:
    """Validate, store and enqueue; returns the state and whether this replays an earlier identical request."""
    checks = validate_request(resources, req)
    store = store_of(resources)
    meta = _meta(resources, tenant, req, checks, idempotency_key=idempotency_key)
    if idempotency_key:
        prior = await store.claim_idempotency(tenant, idempotency_key, meta.id, body_sha)
        if prior is not None:
            return await store.get(tenant, prior), True
    try:
        await store.create(meta)
        await enqueue_cheap(resources, tenant, [meta.id])
    except (TriskError, OSError, ConnectionError) as exc:
        await _rollback(store, tenant, [meta.id], None, idempotency_key)
        raise NotReady(f"could not queue the assessment: {exc}") from exc
    except Exception:
        await _rollback(store, tenant, [meta.id], None, idempotency_key)
        raise
    return AssessmentState(meta=meta), False


async def _rollback(store: Store, tenant: str, aids: list[str], batch_id: str | None, idem: str | None) -> None:
    try:
        await store.delete(tenant, aids, batch_id)
        if idem:
            await store.release_idempotency(tenant, idem)
    except Exception:  # Redis is gone: nothing was acknowledged to the client, the keys expire with retention
        pass


async def accept_batch(resources: Resources, tenant: str, items: list[AssessmentRequest]) -> BatchMeta:
    """Validate every item first; then store all of them and the batch in one transaction, then enqueue."""
    limits = resources.settings.limits
    if not items:
        raise InputError("the batch has no items")
    if len(items) > limits.max_batch_items:
        raise InputError(
            f"the batch has {len(items)} items; the limit is {limits.max_batch_items} (TRISK_MAX_BATCH_ITEMS)"
        )
    checks = [validate_request(resources, req, where=f"items[{i}].") for i, req in enumerate(items)]
    store = store_of(resources)
    batch_id = uuid.uuid4().hex
    metas = [_meta(resources, tenant, req, ch, batch_id=batch_id) for req, ch in zip(items, checks, strict=True)]
    batch = BatchMeta(id=batch_id, tenant=tenant, created_at=time.time(), assessment_ids=[m.id for m in metas])
    try:
        await store.create_many(metas, batch)
        await enqueue_cheap(resources, tenant, batch.assessment_ids)
    except (TriskError, OSError, ConnectionError) as exc:
        await _rollback(store, tenant, batch.assessment_ids, batch_id, None)
        raise NotReady(f"could not queue the batch: {exc}") from exc
    return batch
