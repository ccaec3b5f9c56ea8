"""Review queue, verdict and adjudication logic behind the controllers (Redis queue + SQLite label store)."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from service.app.resources import Resources
from service.app.review.schemas import (
    AdjudicationOut,
    AdjudicationRequest,
    ClaimRequest,
    LeaseOut,
    QueueItemOut,
    ReviewItemOut,
    VerdictOut,
    VerdictRequest,
)
from service.core.errors import InputError, NotFound, NotReady
from service.core.llm import LLMClient, load_panel, select_judges
from service.core.review import (
    ADJUDICATION_PROMPT_HASH,
    ADJUDICATION_PROMPT_VERSION,
    Adjudication,
    QueueItem,
    ReviewDB,
    ReviewQueue,
    Verdict,
    get_review_settings,
    open_db,
    run_panel,
)
from service.core.review.adjudication import PANEL_SIZE
from service.core.store import Store
from service.core.views import render_assessment

__all__ = [
    "adjudicate",
    "claim",
    "item_detail",
    "item_out",
    "queue_of",
    "record_verdict",
    "review_db",
    "verdict_out",
]


def review_db() -> ReviewDB:
    return open_db(get_review_settings().db_path)


def queue_of(resources: Resources) -> ReviewQueue:
    if resources.redis is None:
        raise NotReady("Redis is not connected")
    return ReviewQueue(resources.redis, retention_seconds=resources.settings.redis.retention_seconds)


def item_out(it: QueueItem, status: str = "open", verdicts: int = 0, lease_id: str | None = None) -> QueueItemOut:
    risk = it.snapshot.get("risk") if isinstance(it.snapshot.get("risk"), dict) else None
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
        risk=None if risk is None else {"score": risk.get("score"), "rule": risk.get("rule")},
        lease_id=lease_id,
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
    )


async def claim(resources: Resources, tenant: str, data: ClaimRequest) -> LeaseOut:
    rs = get_review_settings()
    if data.n > rs.max_claim_items:
        raise InputError(f"n is {data.n}; at most {rs.max_claim_items} items per claim (TRISK_REVIEW_MAX_CLAIM)")
    seconds = data.lease_seconds or rs.lease_seconds
    if seconds > rs.max_lease_seconds:
        raise InputError(f"lease_seconds is {seconds}; at most {rs.max_lease_seconds} (renew instead)")
    queue = queue_of(resources)
    filters = {"tier": data.tier, "lang": data.lang, "model": data.model, "batch_id": data.batch}
    lease = await queue.claim(
        tenant,
        data.reviewer,
        data.n,
        seconds,
        filters={k: v for k, v in filters.items() if v is not None},
        flagged_only=data.scope == "flagged",
    )
    items = [item_out(await queue.item(tenant, iid), "leased", 0, lease.id) for iid in lease.items]
    return LeaseOut(lease.id, lease.reviewer, lease.expires_at, lease.created_at, items)


async def record_verdict(resources: Resources, tenant: str, item_id: str, data: VerdictRequest) -> VerdictOut:
    """Append the verdict to SQLite first (the durable record), then take the item out of the open queue."""
    queue = queue_of(resources)
    item = await queue.item(tenant, item_id)  # NotFound for an unknown item
    snapshot = {
        **item.snapshot,
        "passage": item.passage,
        "model": item.model,
        "lang": item.lang,
        "batch_id": item.batch_id,
        "tier": item.tier,
        "percentile": item.percentile,
        "forced": item.forced,
    }
    db = review_db()
    v = await asyncio.to_thread(
        db.add_verdict,
        tenant=tenant,
        item_id=item_id,
        assessment_id=item.assessment_id,
        candidate_id=item.candidate_id,
        reviewer=data.reviewer,
        label=data.label,
        error_category=data.error_category,
        note=data.note,
        lease_id=data.lease_id,
        snapshot=snapshot,
    )
    await queue.mark_reviewed(tenant, item_id)
    return verdict_out(v)


def _judges_of(rendered: dict[str, Any] | None, cid: str, llm: Any) -> dict[str, Any]:
    """The LLM part's answers for a candidate: per signal, its status and detail (GEMBA scores per judge, ...)."""
    if llm is None or cid not in llm.candidates:
        return {}
    return {name: msgspec.to_builtins(sig) for name, sig in llm.candidates[cid].signals.items()}


async def item_detail(resources: Resources, tenant: str, item_id: str) -> ReviewItemOut:
    queue = queue_of(resources)
    item = await queue.item(tenant, item_id)
    (status, count, lease) = (await queue.status_of(tenant, [item_id]))[0]
    db = review_db()
    verdicts = [verdict_out(v) for v in await asyncio.to_thread(db.verdicts, tenant, item_id)]
    adjs = [msgspec.to_builtins(_adj_out(a)) for a in await asyncio.to_thread(db.adjudications, tenant, item_id)]
    store = Store(queue.redis, retention_seconds=resources.settings.redis.retention_seconds)
    snap = item.snapshot
    try:
        state = await store.get(tenant, item.assessment_id)
    except NotFound:
        state = None
    source = candidate = None
    peers: list[dict[str, Any]] = []
    judges: dict[str, Any] = {}
    if state is not None:
        rendered = render_assessment(state)
        source = rendered["source"]
        texts = {c.id: c for c in state.meta.request.candidates}
        for c in rendered["candidates"]:
            row = {
                "id": c["id"],
                "model": c["model"],
                "text": texts[c["id"]].text,
                "risk": c["risk"],
                "budget": c["budget"],
                "flags": c["flags"],
            }
            if c["id"] == item.candidate_id:
                candidate = row
            else:
                peers.append(row)
        judges = _judges_of(rendered, item.candidate_id, state.llm)
    return ReviewItemOut(
        item=item_out(item, status, count, lease),
        assessment_status=state.status if state is not None else "expired",
        source=source,
        candidate=candidate,
        peers=peers,
        signals=snap.get("signals") or {},
        flags=snap.get("flags") or [],
        judges=judges or {"judge_scores": snap.get("judge_scores") or {}},
        risk=snap.get("risk"),
        routing=snap.get("routing"),
        budget=snap.get("budget"),
        verdicts=verdicts,
        adjudications=adjs,
    )


def _adj_out(a: Adjudication) -> AdjudicationOut:
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
        a.judges,
        a.votes,
    )


async def adjudicate(resources: Resources, tenant: str, data: AdjudicationRequest) -> AdjudicationOut:
    """Run the reference-aided panel and store its label (or a skipped record with the reason); never a guess."""
    settings = resources.settings
    limit = settings.limits.max_text_chars
    source, candidate, model, snapshot = data.source, data.candidate, data.candidate_model, None
    if data.item_id is not None:
        queue = queue_of(resources)
        item = await queue.item(tenant, data.item_id)
        snapshot = {
            **item.snapshot,
            "passage": item.passage,
            "model": item.model,
            "lang": item.lang,
            "forced": item.forced,
        }
        model = model or item.model
        if source is None or candidate is None:
            try:
                state = await Store(queue.redis, retention_seconds=0).get(tenant, item.assessment_id)
            except NotFound as exc:
                raise InputError(f"item {data.item_id}'s assessment has expired; send source and candidate") from exc
            source = source or state.meta.request.source.text
            candidate = candidate or next(c.text for c in state.meta.request.candidates if c.id == item.candidate_id)
    if not source or not source.strip() or not candidate or not candidate.strip():
        raise InputError("source and candidate are required (or give item_id of a queued item)")
    for name, text in (("source", source), ("candidate", candidate), ("reference", data.reference)):
        if len(text) > limit:
            raise InputError(f"{name} has {len(text)} characters; the limit is {limit}")
    panel_name = data.panel or settings.llm.panel
    base = Adjudication(
        id=uuid.uuid4().hex,
        tenant=tenant,
        created_at=time.time(),
        status="skipped",
        label=None,
        reason=None,
        source=source,
        candidate=candidate,
        reference=data.reference,
        source_lang=data.source_lang,
        candidate_model=model,
        item_id=data.item_id,
        panel=panel_name,
        panel_version=None,
        prompt_version=ADJUDICATION_PROMPT_VERSION,
        prompt_hash=ADJUDICATION_PROMPT_HASH,
        judges=[],
        votes={},
        snapshot=snapshot,
    )
    db = review_db()
    if not settings.llm.configured:
        rec = msgspec.structs.replace(base, reason="no LLM provider configured (TRISK_LLM_BASE_URL is empty)")
        return _adj_out(await asyncio.to_thread(db.add_adjudication, rec))
    panel = load_panel(panel_name, panels_dir=Path(settings.risk.models_dir) / "panels")
    selection = select_judges(panel, model)
    judges = selection.judges[:PANEL_SIZE]
    if len(judges) < PANEL_SIZE:
        rec = msgspec.structs.replace(
            base,
            panel_version=panel.version,
            reason=f"panel {panel.name!r} has {len(judges)} eligible judges for this candidate; adjudication needs "
            f"{PANEL_SIZE}",
        )
        return _adj_out(await asyncio.to_thread(db.add_adjudication, rec))
    async with LLMClient.from_settings(settings.llm) as client:
        votes, label, counts = await run_panel(
            client, judges, settings.llm, source=source, reference=data.reference, candidate=candidate
        )
    rec = msgspec.structs.replace(
        base,
        status="done" if label is not None else "inconclusive",
        label=label,
        reason=None
        if label is not None
        else (
            f"{PANEL_SIZE - counts['valid_answers']} judge(s) gave no valid answer and their votes could change "
            "the label"
        ),
        panel_version=panel.version,
        judges=[msgspec.to_builtins(v) for v in votes],
        votes=counts,
    )
    return _adj_out(await asyncio.to_thread(db.add_adjudication, rec))


async def adjudication(tenant: str, adj_id: str) -> AdjudicationOut:
    rec = await asyncio.to_thread(review_db().adjudication, tenant, adj_id)
    if rec is None:
        raise NotFound(f"no adjudication {adj_id!r}")
    return _adj_out(rec)


async def adjudications(tenant: str, item_id: str | None) -> list[AdjudicationOut]:
    return [_adj_out(a) for a in await asyncio.to_thread(review_db().adjudications, tenant, item_id)]
