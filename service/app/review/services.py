"""Review queue, verdict and adjudication logic behind the controllers (queue and verdicts in the durable store)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from service.app.auth import reviewer_of
from service.app.deps import JobQueue
from service.app.review.schemas import (
    AdjudicationOut,
    AdjudicationRequest,
    ClaimRequest,
    LeaseOut,
    QueueItemOut,
    QueuePage,
    ReleaseOut,
    RenewRequest,
    ReviewCandidate,
    ReviewItemOut,
    VerdictOut,
    VerdictRequest,
)
from service.core.findings import check_spans
from service.core.judges.llm import CandidateChecks
from service.core.types import SignalResult
from service.platform.auth import Principal
from service.platform.errors import Forbidden, InputError, NotFound
from service.platform.settings import Settings
from service.review import JudgeVote, Lease, QueueItem, ReviewQueue, get_review_settings
from service.review.adjudication_jobs import (
    new_adjudication,
    pending_adjudication,
    plan_adjudication,
    queue_adjudication,
    store_once,
)
from service.state.durable import Adjudication, DurableStore, Verdict
from service.state.store import Store
from service.state.views import LLMTierView, render_assessment

__all__ = [
    "QueueFilters",
    "Reviewer",
    "acting_reviewer",
    "adjudicate",
    "adjudication",
    "adjudication_out",
    "adjudications",
    "claim",
    "item_detail",
    "item_out",
    "queue_page",
    "record_verdict",
    "release",
    "renew",
    "verdict_out",
]


def item_out(
    it: QueueItem,
    status: Any = "open",
    verdicts: int = 0,
    lease_id: str | None = None,
    leased_to: str | None = None,
    lease_expires: float | None = None,
) -> QueueItemOut:
    return QueueItemOut(
        id=it.id,
        assessment_id=it.assessment_id,
        candidate_id=it.candidate_id,
        status=status,
        verdicts=verdicts,
        priority=it.priority,
        flagged=it.flagged,
        forced=it.forced,
        tier=it.tier,
        percentile=it.percentile,
        lang=it.lang,
        model=it.model,
        batch_id=it.batch_id,
        passage=it.passage,
        risk=it.snapshot.risk,
        lease_id=lease_id,
        flags=it.snapshot.flags,
        leased_to=leased_to,
        lease_expires=lease_expires,
    )


@dataclass(frozen=True)
class Reviewer:
    """Who claims, renews, releases or gives a verdict: the key's reviewer name, and whether the key is an admin's
    (an admin may renew or release another reviewer's lease, never give a verdict under it)."""

    name: str
    admin: bool = False


def acting_reviewer(principal: Principal, named: str | None = None) -> Reviewer:
    """The reviewer is the key's (``reviewer_of``); a name the request gives must be that one, else 403: a verdict
    is never recorded under a name its key does not carry, nor under another name than the client asked for."""
    me = reviewer_of(principal)
    if named is not None and named != me:
        raise Forbidden(
            f"this key reviews as {me!r}, not {named!r}: leave reviewer out (the key names its reviewer)",
            extra={"reviewer": me},
        )
    return Reviewer(me, principal.allows("admin"))


@dataclass(frozen=True)
class QueueFilters:
    """What a queue listing or a claim is narrowed to (the queue route's query, the workbench's filter form)."""

    tier: str | None = None
    lang: str | None = None
    model: str | None = None
    batch: str | None = None
    scope: Literal["flagged", "all"] = "flagged"
    status: Literal["pending", "open", "leased", "reviewed", "any"] = "pending"
    leased_to: str | None = None  # only the items this reviewer's live leases hold (with status "leased")

    def attributes(self) -> dict[str, str]:
        """The item attributes to match, by the queue's field names; an empty filter matches everything."""
        given = {
            "tier": self.tier,
            "lang": self.lang,
            "model": self.model,
            "batch_id": self.batch,
            "lease_reviewer": self.leased_to,
        }
        return {k: v for k, v in given.items() if v}


async def queue_page(queue: ReviewQueue, tenant: str, filters: QueueFilters, *, offset: int, limit: int) -> QueuePage:
    """One page of the queue in the one ranking (``risk.priority``), with how many match (a bounded count)."""
    listed = await queue.list(
        tenant,
        filters=filters.attributes(),
        flagged_only=filters.scope == "flagged",
        status=filters.status,
        offset=offset,
        limit=limit,
    )
    items = [item_out(*row) for row in listed.rows]
    nxt = offset + limit if listed.more else None
    return QueuePage(
        items=items, total=listed.total, total_exact=listed.exact, offset=offset, limit=limit, next_offset=nxt
    )


def verdict_out(v: Verdict) -> VerdictOut:
    return VerdictOut(
        v.id,
        v.tenant,
        v.item_id,
        v.assessment_id,
        v.candidate_id,
        v.reviewer,
        v.label,
        v.error_category,
        v.note,
        v.lease_id,
        v.created_at,
        v.opinion,
        list(v.findings),
        list(v.spans),
        v.supersedes,
        v.lease_seconds,
        v.active_seconds,
    )


async def claim(queue: ReviewQueue, tenant: str, who: Reviewer, data: ClaimRequest) -> LeaseOut:
    rs = get_review_settings()
    if data.n > rs.max_claim_items:
        raise InputError(f"n is {data.n}; at most {rs.max_claim_items} items per claim (TRISK_REVIEW_MAX_CLAIM)")
    seconds = data.lease_seconds or rs.lease_seconds
    if seconds > rs.max_lease_seconds:
        raise InputError(f"lease_seconds is {seconds}; at most {rs.max_lease_seconds} (renew instead)")
    filters = QueueFilters(tier=data.tier, lang=data.lang, model=data.model, batch=data.batch, scope=data.scope)
    lease = await queue.claim(
        tenant, who.name, data.n, seconds, filters=filters.attributes(), flagged_only=filters.scope == "flagged"
    )
    return await _lease_out(queue, tenant, lease)


async def _lease_out(queue: ReviewQueue, tenant: str, lease: Lease) -> LeaseOut:
    items = [
        item_out(await queue.item(tenant, iid), "leased", 0, lease.id, lease.reviewer, lease.expires_at)
        for iid in lease.items
    ]
    return LeaseOut(lease.id, lease.reviewer, lease.expires_at, lease.created_at, items)


async def renew(queue: ReviewQueue, tenant: str, who: Reviewer, lease_id: str, data: RenewRequest) -> LeaseOut:
    """Extend a lease's visibility timeout (its holder, or an admin key; 403 for another, 404 once it has ended)."""
    seconds = data.lease_seconds or get_review_settings().lease_seconds
    return await _lease_out(queue, tenant, await queue.renew(tenant, lease_id, who.name, seconds, admin=who.admin))


async def release(queue: ReviewQueue, tenant: str, who: Reviewer, lease_id: str) -> ReleaseOut:
    """Give a lease up (its holder, or an admin key): its unreviewed items go back to the queue."""
    released = await queue.release(tenant, lease_id, who.name, admin=who.admin)
    return ReleaseOut(lease_id=lease_id, released=released)


async def _texts(queue: ReviewQueue, store: Store, tenant: str, item_id: str) -> dict[str, str] | None:
    """The item's source and candidate as submitted, by side (None once its assessment has expired)."""
    item = await queue.item(tenant, item_id)
    try:
        state = await store.get(tenant, item.assessment_id)
    except NotFound:
        return None
    candidate = next((c.text for c in state.meta.request.candidates if c.id == item.candidate_id), "")
    return {"source": state.meta.request.source.text, "candidate": candidate}


async def record_verdict(
    queue: ReviewQueue,
    store: Store,
    tenant: str,
    who: Reviewer,
    item_id: str,
    data: VerdictRequest,
    request_key: str | None = None,
) -> tuple[VerdictOut, bool]:
    """Append the verdict and count it on the item in one transaction, under the lease rules; returns it and whether
    it was stored before (a retry: ``request_key`` is the request's Idempotency-Key). Judgements must name the item's
    findings and spans lie within their texts (422 otherwise, nothing stored)."""
    if data.spans:
        check_spans(data.spans, await _texts(queue, store, tenant, item_id))
    v, replayed = await queue.verdict(
        tenant,
        item_id,
        reviewer=who.name,
        label=data.label,
        error_category=data.error_category,
        note=data.note,
        lease_id=data.lease_id,
        request_key=request_key,
        findings=tuple(data.findings),
        spans=tuple(data.spans),
        active_seconds=data.active_seconds,
        replaces=data.replaces,
        replace_seconds=get_review_settings().replace_seconds,
    )
    return verdict_out(v), replayed


async def item_verdicts(queue: ReviewQueue, db: DurableStore, tenant: str, item_id: str) -> list[VerdictOut]:
    """Every verdict on the tenant's item, oldest first; 404 (as for the item itself) when the tenant has neither the
    item nor a verdict on it: another tenant's item and one that never existed read alike, not as an empty list.
    Verdicts outlive their item (deleted with its assessment), so an item with verdicts still lists them."""
    rows = await asyncio.to_thread(db.verdicts, tenant, item_id)
    if not rows:
        await queue.item_state(tenant, item_id)  # NotFound when the tenant has no such item
    return [verdict_out(v) for v in rows]


async def item_detail(queue: ReviewQueue, store: Store, db: DurableStore, tenant: str, item_id: str) -> ReviewItemOut:
    held = await queue.item_state(tenant, item_id)
    item = held.item
    verdicts = [verdict_out(v) for v in await asyncio.to_thread(db.verdicts, tenant, item_id)]
    adjs = [adjudication_out(a) for a in await asyncio.to_thread(db.adjudications, tenant, item_id)]
    snap = item.snapshot
    try:
        state = await store.get(tenant, item.assessment_id)
    except NotFound:
        state = None
    source = candidate = None
    peers: list[ReviewCandidate] = []
    judges: dict[str, SignalResult] = {}
    answers: CandidateChecks | None = None
    llm_tier: LLMTierView | None = None
    if state is not None:
        view = render_assessment(state)
        source = view.source
        llm_tier = view.llm_tier
        if view.llm is not None:
            answers = view.llm.details.get(item.candidate_id)
        texts = {c.id: c.text for c in state.meta.request.candidates}
        for c in view.candidates:
            row = ReviewCandidate(id=c.id, model=c.model, text=texts[c.id], risk=c.risk, budget=c.budget, flags=c.flags)
            if c.id == item.candidate_id:
                candidate = row
            else:
                peers.append(row)
        llm = state.llm.candidates.get(item.candidate_id) if state.llm is not None else None
        judges = dict(llm.signals) if llm is not None else {}
    return ReviewItemOut(
        item=item_out(*held),
        assessment_status=state.status if state is not None else "expired",
        source=source,
        candidate=candidate,
        peers=peers,
        signals=snap.signals,
        flags=snap.flags,
        judges=judges,
        judge_scores=snap.judge_scores,
        risk=snap.risk,
        routing=snap.routing,
        budget=snap.budget,
        verdicts=verdicts,
        adjudications=adjs,
        judge_answers=answers,
        llm_tier=llm_tier,
        findings=snap.findings(),
    )


def adjudication_out(a: Adjudication) -> AdjudicationOut:
    return AdjudicationOut(
        a.id,
        a.tenant,
        a.created_at,
        a.status,
        a.label,
        a.reason,
        a.item_id,
        a.panel,
        a.panel_version,
        a.prompt_version,
        a.prompt_hash,
        msgspec.convert(a.judges, list[JudgeVote]),
        a.votes,
    )


async def adjudicate(
    settings: Settings,
    queue: ReviewQueue,
    store: Store,
    db: DurableStore,
    jobs: JobQueue,
    tenant: str,
    data: AdjudicationRequest,
) -> AdjudicationOut:
    """Queue the reference-aided panel for a worker (status pending), or store at once the record of a panel that
    cannot run (skipped, with the reason); a label is never guessed."""
    limit = settings.limits.max_text_chars
    source, candidate, model, snapshot = data.source, data.candidate, data.candidate_model, None
    if data.item_id is not None:
        item = await queue.item(tenant, data.item_id)
        snapshot = {
            **msgspec.to_builtins(item.snapshot),
            "passage": item.passage,
            "model": item.model,
            "lang": item.lang,
            "forced": item.forced,
        }
        model = model or item.model
        if source is None or candidate is None:
            try:
                state = await store.get(tenant, item.assessment_id)
            except NotFound as exc:
                raise InputError(f"item {data.item_id}'s assessment has expired; send source and candidate") from exc
            source = source or state.meta.request.source.text
            candidate = candidate or next(c.text for c in state.meta.request.candidates if c.id == item.candidate_id)
    if not source or not source.strip() or not candidate or not candidate.strip():
        raise InputError("source and candidate are required (or give item_id of a queued item)")
    for name, text in (("source", source), ("candidate", candidate), ("reference", data.reference)):
        if len(text) > limit:
            raise InputError(f"{name} has {len(text)} characters; the limit is {limit}")
    pending = new_adjudication(
        tenant,
        source=source,
        candidate=candidate,
        reference=data.reference,
        source_lang=data.source_lang,
        candidate_model=model,
        item_id=data.item_id,
        panel=data.panel or settings.llm.panel,
        snapshot=snapshot,
    )
    record = plan_adjudication(pending, settings)
    if record is not None:
        return adjudication_out(await asyncio.to_thread(store_once, db, record))
    await queue_adjudication(store, jobs, pending)
    return adjudication_out(pending)


async def adjudication(store: Store, db: DurableStore, tenant: str, adj_id: str) -> AdjudicationOut:
    rec = await asyncio.to_thread(db.adjudication, tenant, adj_id)
    if rec is None:
        rec = await pending_adjudication(store, tenant, adj_id)
    if rec is None:
        raise NotFound(f"no adjudication {adj_id!r}")
    return adjudication_out(rec)


async def adjudications(db: DurableStore, tenant: str, item_id: str | None) -> list[AdjudicationOut]:
    return [adjudication_out(a) for a in await asyncio.to_thread(db.adjudications, tenant, item_id)]
