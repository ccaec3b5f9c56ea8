"""Callback jobs: ``deliver_callback`` POSTs an assessment (its cheap-tier result or its final one) to the URL the
request gave; every failure is recorded on the assessment, never silent."""

from __future__ import annotations

import asyncio
import time

import httpx
import msgspec

from service.core.records import CallbackEvent, callback_events
from service.platform.callbacks import CallbackRefused, post_callback
from service.platform.errors import NotFound
from service.platform.retry import callback_retry_delay
from service.platform.sealing import Sealer
from service.platform.telemetry import CHECK_FAILURES
from service.state import lanes
from service.state.durable.access import AccessStore
from service.state.store import AssessmentState
from service.state.views import render_assessment
from workers.context import WorkerContext
from workers.policy import FailurePolicy, observed

__all__ = ["deliver_callback", "queue_callback"]


async def queue_callback(w: WorkerContext, state: AssessmentState, event: CallbackEvent) -> None:
    """Queue one callback event when the request asked for it (a fixed job id: a re-run queues nothing new)."""
    meta = state.meta
    if event not in callback_events(meta.request):
        return
    if event == "final":  # its state is written with the assessment; its job keeps the arguments it always had
        await lanes.enqueue_follow_on(w.pool, "deliver_callback", meta, job_id=f"{meta.id}:callback")
        return
    await w.store.open_callback(meta.tenant, meta.id, str(meta.request.callback_url), event)
    await lanes.enqueue_follow_on(w.pool, "deliver_callback", meta, event, job_id=f"{meta.id}:callback:{event}")


async def _post(w: WorkerContext, tenant: str, state: AssessmentState, url: str, event: CallbackEvent) -> None:
    """One POST, signed with the tenant's callback secret; an answer other than 2xx raises as an HTTP error."""
    body = msgspec.json.encode(render_assessment(state))
    sealer = Sealer.from_setting(w.settings.durable.secret_keys)
    secret = await asyncio.to_thread(AccessStore(w.catalog.db, sealer).callback_secret, tenant)
    resp = await post_callback(
        w.http,
        url,
        body,
        secret=secret,
        policy=w.settings.jobs.callback_policy,
        extra_headers=[("Trisk-Event", event)],  # the body's status says which result it is: done supersedes
    )
    if resp.status_code >= 300:
        answer = httpx.Response(resp.status_code, request=resp.request)  # its status: the body is not kept
        raise httpx.HTTPStatusError(f"callback answered {resp.status_code}", request=resp.request, response=answer)


@observed("deliver_callback")
async def deliver_callback(w: WorkerContext, tries: int, tenant: str, aid: str, event: CallbackEvent = "final") -> str:
    """POST the assessment to its callback URL (``event``: its cheap-tier result or its final one); failures are
    recorded on the assessment, never silent."""
    try:
        state = await w.store.get(tenant, aid)
    except NotFound:
        return "gone"
    cb = state.callback_of(event)
    if cb is None or cb.status == "delivered":
        return "nothing to do"
    jobs = w.settings.jobs
    # an HTTP failure is tried again for TRISK_CALLBACK_MAX_TRIES deliveries, each on its own backoff
    policy = FailurePolicy(max_tries=jobs.callback_max_tries, retryable=(httpx.HTTPError,))
    cb.attempts += 1
    try:
        await _post(w, tenant, state, cb.url, event)
    except CallbackRefused as exc:
        # the name resolves to an address the policy refuses: trying again would not change that
        CHECK_FAILURES.labels("callback").inc()
        cb.last_error, cb.status = f"refused: {exc.detail}", "failed"
        await w.store.put_callback(tenant, aid, cb, event)
        return "refused"
    except httpx.HTTPError as exc:
        CHECK_FAILURES.labels("callback").inc()
        cb.last_error = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        cb.status = "pending" if policy.retries(exc, tries) else "failed"
        await w.store.put_callback(tenant, aid, cb, event)
        policy.retry(exc, tries, lambda t: callback_retry_delay(t, jobs.callback_backoff_seconds))
        return "failed"
    cb.status = "delivered"
    cb.delivered_at = time.time()
    cb.last_error = None
    await w.store.put_callback(tenant, aid, cb, event)
    return "delivered"
