"""The review queue: items (assessment id, candidate id) in budget order, leases with a visibility timeout, kept as
rows of the durable store (``service.state.durable.review_items`` has the SQL and why leases live on the rows).

Priority: the candidate's ``risk.priority``, the one ranking (``service.core.ranking``: forced candidates first by
flag severity, then by risk score); higher is reviewed first. An item is *flagged* when it is forced, its budget tier
is not ``rest`` (top 20% or riskier), or it carries a flag of severity critical, major or minor (``info`` flags do
not count). Listing and claiming default to flagged items; ``scope=all`` includes every candidate.

An item's status: ``reviewed`` once it has a verdict (it is never claimed again; further opinions stay possible),
else ``leased`` while a lease on it is live, else ``open``. Items live and die with their assessment.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
import uuid
from typing import Any, NamedTuple

import msgspec

from service.core.budget import Budget
from service.core.findings import Finding, check_judgements, findings_of
from service.core.judges.llm import JudgeSpan
from service.core.records import LLM_SIGNALS, Routing, merged_outcome
from service.core.risk import RiskResult
from service.core.types import Flag, SignalResult, SignalValue
from service.core.typology import ErrorSpan, FindingJudgement
from service.platform.errors import InputError
from service.state.durable import review_items as rows
from service.state.durable.records import Label, Verdict
from service.state.durable.review_items import ItemStatus
from service.state.durable.store import DurableStore
from service.state.store import AssessmentState, Store
from service.state.views import candidate_result

__all__ = [
    "FLAG_SEVERITIES",
    "MAX_OFFSET",
    "ItemSnapshot",
    "Lease",
    "QueueItem",
    "QueueListing",
    "ReviewQueue",
    "enqueue_for_review",
    "item_id_of",
    "queue_items",
    "signal_snapshot",
    "verdict_snapshot",
]

FLAG_SEVERITIES = ("critical", "major", "minor")

# the deepest page a listing serves: an offset walks every row before it (a deeper one is a 400, not a scan of a
# million rows or an integer the database cannot hold); filters narrow a queue further than paging does
MAX_OFFSET = 100_000


class ItemSnapshot(msgspec.Struct):
    """What a verdict copies of its item: every signal, the flags, each GEMBA judge's score (None = invalid answer),
    the risk, routing and budget, and the model versions that scored it."""

    signals: dict[str, SignalResult]
    flags: list[Flag]
    judge_scores: dict[str, float | None]
    risk: RiskResult | None
    routing: Routing | None
    budget: Budget | None
    risk_models: list[str] | None
    # the judges' merged error spans (none in a snapshot taken before they existed)
    judge_spans: list[JudgeSpan] = msgspec.field(default_factory=list)

    def findings(self) -> list[Finding]:
        """The findings a reviewer judges on this item: its flags, then its judges' error spans (``findings_of``)."""
        return findings_of(self.flags, self.judge_spans)


class QueueItem(msgspec.Struct):
    """One reviewable candidate, with the attributes the queue filters on and the snapshot a verdict copies."""

    id: str
    tenant: str
    assessment_id: str
    candidate_id: str
    enqueued_at: float
    priority: float
    flagged: bool
    forced: bool
    tier: str | None
    percentile: float | None
    lang: str
    model: str | None
    batch_id: str | None
    passage: str  # grouping key for cross-validation: the source ref, else a hash of the source text
    snapshot: ItemSnapshot
    expires_at: float | None = None  # when its assessment expires (TRISK_RETENTION_SECONDS); None: never


class Lease(msgspec.Struct):
    id: str
    tenant: str
    reviewer: str
    items: list[str]
    expires_at: float
    created_at: float


def item_id_of(assessment_id: str, candidate_id: str) -> str:
    """URL-safe item id: the assessment id and a short digest of the candidate id (which may hold any text)."""
    return f"{assessment_id}-{hashlib.sha256(candidate_id.encode()).hexdigest()[:12]}"


def signal_snapshot(state: AssessmentState, candidate_id: str) -> ItemSnapshot:
    """A candidate's results (``views.candidate_result``, the one merge) with GEMBA's per-judge scores."""
    model = next((c.model for c in state.meta.request.candidates if c.id == candidate_id), None)
    result = candidate_result(state, candidate_id, model)
    judges: dict[str, float | None] = {}
    gemba = result.signals.get(LLM_SIGNALS["gemba"])
    scores = gemba.detail.get("scores") if isinstance(gemba, SignalValue) else None
    if isinstance(scores, dict):
        judges = {str(jid): None if sc is None else float(sc) for jid, sc in scores.items()}
    return ItemSnapshot(
        signals=result.signals,
        flags=result.flags,
        judge_scores=judges,
        risk=result.risk,
        routing=result.routing,
        budget=result.budget,
        risk_models=state.published.risk_models if state.published is not None else None,
        judge_spans=merged_outcome(candidate_id, state.cheap, state.llm).spans,
    )


def queue_items(tenant: str, state: AssessmentState, retention_seconds: int = 0) -> list[QueueItem]:
    """The queue items of an assessment's published result (final, else the cheap tier's): one per candidate, each
    ending when the assessment does (its creation plus ``retention_seconds``; 0 keeps them)."""
    meta = state.meta
    req = meta.request
    passage = req.source.ref or "sha:" + hashlib.sha256(req.source.text.encode()).hexdigest()[:16]
    now = time.time()
    expires_at = meta.created_at + retention_seconds if retention_seconds > 0 else None
    out = []
    published = state.published
    for c in req.candidates:
        final = published.candidates.get(c.id) if published is not None else None
        if final is None:
            continue
        forced = final.risk.forced_severity is not None
        flagged = forced or final.budget.tier != "rest" or any(f.severity in FLAG_SEVERITIES for f in final.flags)
        out.append(
            QueueItem(
                id=item_id_of(meta.id, c.id),
                tenant=tenant,
                assessment_id=meta.id,
                candidate_id=c.id,
                enqueued_at=now,
                priority=final.risk.priority,
                flagged=flagged,
                forced=forced,
                tier=final.budget.tier,
                percentile=final.budget.percentile,
                lang=req.source.lang,
                model=c.model,
                batch_id=meta.batch_id,
                passage=passage,
                snapshot=signal_snapshot(state, c.id),
                expires_at=expires_at,
            )
        )
    return out


def verdict_snapshot(item: QueueItem) -> dict[str, Any]:
    """The item's results plus what calibration groups and filters by, as stored with the verdict (plain JSON, so
    a verdict stays readable by every later version of the service)."""
    return {
        **msgspec.to_builtins(item.snapshot),
        "passage": item.passage,
        "model": item.model,
        "lang": item.lang,
        "batch_id": item.batch_id,
        "tier": item.tier,
        "percentile": item.percentile,
        "forced": item.forced,
    }


_item_dec = msgspec.json.Decoder(QueueItem)
_enc = msgspec.json.Encoder()


class QueueRow(NamedTuple):
    """An item and where it stands: status, verdict count, and its live lease (id, holder, end) if any."""

    item: QueueItem
    status: ItemStatus
    verdicts: int
    lease_id: str | None
    leased_to: str | None = None
    lease_expires: float | None = None


def _queue_row(row: rows.ItemRow) -> QueueRow:
    return QueueRow(_decoded(row), row.status, row.verdicts, row.lease_id, row.leased_to, row.lease_expires)


class QueueListing(NamedTuple):
    """A page of the queue: its rows, the matching items counted up to a bound (``exact`` False past it), and whether
    another page follows."""

    rows: list[QueueRow]
    total: int
    exact: bool
    more: bool


def _decoded(row: rows.ItemRow) -> QueueItem:
    # the body a refresh rewrote carries the refresh's time: the item keeps the time it joined the queue
    return msgspec.structs.replace(_item_dec.decode(row.body), enqueued_at=row.enqueued_at)


def _columns(it: QueueItem) -> dict[str, Any]:
    return {
        "id": it.id,
        "assessment_id": it.assessment_id,
        "candidate_id": it.candidate_id,
        "enqueued_at": it.enqueued_at,
        "expires_at": it.expires_at,
        "priority": it.priority,
        "flagged": it.flagged,
        "forced": it.forced,
        "tier": it.tier,
        "lang": it.lang,
        "model": it.model,
        "batch_id": it.batch_id,
        "body": _enc.encode(it).decode(),
    }


class ReviewQueue:
    """The tenant-scoped review queue in the durable store (its calls run in a thread: the store blocks)."""

    def __init__(self, db: DurableStore) -> None:
        self.db = db

    async def add(self, tenant: str, items: list[QueueItem], *, refresh: bool = False) -> int:
        """Add items (idempotent: known items keep their state; with ``refresh`` they take the new priority and
        snapshot, keeping the time they joined, their lease and their verdicts); returns how many were new."""
        for it in items:
            if it.tenant != tenant:
                raise InputError(f"item {it.id} belongs to tenant {it.tenant!r}, not {tenant!r}")
        if not items:
            return 0
        return await asyncio.to_thread(rows.add_items, self.db, tenant, [_columns(it) for it in items], refresh=refresh)

    async def item(self, tenant: str, item_id: str) -> QueueItem:
        return (await self.item_state(tenant, item_id))[0]

    async def item_state(self, tenant: str, item_id: str) -> QueueRow:
        """The item with its status, verdict count and live lease (NotFound when unknown or expired)."""
        return _queue_row(await asyncio.to_thread(rows.item_row, self.db, tenant, item_id, time.time()))

    async def list(
        self,
        tenant: str,
        *,
        filters: dict[str, str],
        flagged_only: bool,
        status: str,
        offset: int,
        limit: int,
    ) -> QueueListing:
        """Items in budget order (priority desc), filtered: one page, the number that match (counted up to
        ``offset + rows.COUNTED``) and whether another page follows."""
        page = await asyncio.to_thread(
            rows.list_items,
            self.db,
            tenant,
            filters=filters,
            flagged_only=flagged_only,
            status=status,
            offset=offset,
            limit=limit,
            now=time.time(),
        )
        listed = [_queue_row(r) for r in page.items]
        return QueueListing(listed, page.total, page.exact, page.more)

    async def claim(
        self,
        tenant: str,
        reviewer: str,
        n: int,
        lease_seconds: float,
        *,
        filters: dict[str, str] | None = None,
        flagged_only: bool = True,
    ) -> Lease:
        """Lease up to ``n`` open items (budget order) to ``reviewer``; no item goes to two reviewers."""
        if n <= 0:
            raise InputError(f"n must be at least 1 (got {n})")
        if lease_seconds <= 0:
            raise InputError(f"lease_seconds must be positive (got {lease_seconds})")
        filt = {f: v for f, v in (filters or {}).items() if v is not None}
        lease = await asyncio.to_thread(
            rows.claim,
            self.db,
            tenant,
            reviewer,
            n,
            lease_seconds,
            filters=filt,
            flagged_only=flagged_only,
            lease_id=uuid.uuid4().hex,
            now=time.time(),
        )
        return _lease(lease)

    async def renew(
        self, tenant: str, lease_id: str, reviewer: str, lease_seconds: float, *, admin: bool = False
    ) -> Lease:
        """Extend a live lease (its holder; an admin key for anyone's): NotFound once it ended, Forbidden for
        another reviewer, Conflict when every item of it has a verdict."""
        if lease_seconds <= 0:
            raise InputError(f"lease_seconds must be positive (got {lease_seconds})")
        lease = await asyncio.to_thread(
            rows.renew, self.db, tenant, lease_id, reviewer, admin=admin, lease_seconds=lease_seconds, now=time.time()
        )
        return _lease(lease)

    async def release(self, tenant: str, lease_id: str, reviewer: str, *, admin: bool = False) -> int:
        """End a live lease (its holder; an admin key for anyone's); returns how many items went back to the queue."""
        return await asyncio.to_thread(rows.release, self.db, tenant, lease_id, reviewer, admin=admin, now=time.time())

    async def verdict(
        self,
        tenant: str,
        item_id: str,
        *,
        reviewer: str,
        label: Label,
        error_category: str | None = None,
        note: str | None = None,
        lease_id: str | None = None,
        request_key: str | None = None,
        findings: tuple[FindingJudgement, ...] = (),
        spans: tuple[ErrorSpan, ...] = (),
        active_seconds: float | None = None,
        replaces: int | None = None,
        replace_seconds: float = 0.0,
    ) -> tuple[Verdict, bool]:
        """Record a verdict under the lease rules (``review_items.record_verdict``); returns it and whether it was
        stored already (a retry). Each judgement must name a finding of the item as stored (InputError otherwise),
        checked in the verdict's transaction against the snapshot the verdict keeps."""

        def snapshot(body: str) -> dict[str, Any]:
            item = _item_dec.decode(body)
            check_judgements(item.snapshot.findings(), findings)
            return verdict_snapshot(item)

        return await asyncio.to_thread(
            rows.record_verdict,
            self.db,
            tenant,
            item_id,
            reviewer=reviewer,
            label=label,
            error_category=error_category,
            note=note,
            lease_id=lease_id,
            request_key=request_key,
            snapshot=snapshot,
            now=time.time(),
            findings=findings,
            spans=spans,
            active_seconds=active_seconds,
            replaces=replaces,
            replace_seconds=replace_seconds,
        )


def _lease(row: rows.LeaseRow) -> Lease:
    return Lease(row.id, row.tenant, row.reviewer, row.items, row.expires_at, row.created_at)


async def enqueue_for_review(
    db: DurableStore, tenant: str, state: AssessmentState, *, retention_seconds: int = 0, refresh: bool = False
) -> int:
    """The worker hook: call when an assessment's result is published (the cheap tier's, then with ``refresh`` the
    final one). Adds every candidate to the tenant's review queue (idempotent); returns how many items were new."""
    if state.meta.tenant != tenant:
        raise InputError(f"assessment {state.meta.id} belongs to tenant {state.meta.tenant!r}, not {tenant!r}")
    return await ReviewQueue(db).add(tenant, queue_items(tenant, state, retention_seconds), refresh=refresh)


async def rebuild_review_items(
    db: DurableStore, store: Store, tenant: str, assessment_ids: list[str], *, retention_seconds: int = 0
) -> int:
    """Put the candidates of these stored assessments with a published result in the review queue, as the tail
    would have (idempotent: known items keep their state), and count the verdicts they already have, so an item an
    earlier release's reviewers judged reads ``reviewed``. Leases are not carried over: they are work in flight, and
    a reviewer claims again. Returns how many items were new."""
    added = 0
    queue = ReviewQueue(db)
    for start in range(0, len(assessment_ids), 200):
        states = await store.get_many(tenant, assessment_ids[start : start + 200])
        published = [st for st in states if st is not None and st.published is not None]
        items = [it for st in published for it in queue_items(tenant, st, retention_seconds)]
        added += await queue.add(tenant, items)
        await asyncio.to_thread(rows.count_verdicts, db, tenant, [it.id for it in items])
    return added
