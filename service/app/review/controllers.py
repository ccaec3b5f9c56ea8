"""``/v1/review`` (queue, claims, verdicts, item detail) and ``/v1/adjudications`` (reference-aided panel labels)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any, Literal

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.params import Parameter
from litestar.response import Stream

from service.app.auth import access, principal_of
from service.app.deps import JobQueue
from service.app.exports import window
from service.app.review import services
from service.app.review.schemas import (
    AdjudicationOut,
    AdjudicationRequest,
    ClaimRequest,
    LeaseOut,
    QueuePage,
    ReleaseOut,
    RenewRequest,
    ReviewItemOut,
    VerdictOut,
    VerdictRequest,
)
from service.platform.settings import Settings
from service.review import MAX_OFFSET, ReviewQueue
from service.state.durable import DurableStore
from service.state.store import Store

__all__ = ["AdjudicationController", "ReviewController", "VerdictExportController"]

_enc = msgspec.json.Encoder()


class ReviewController(Controller):
    path = "/v1/review"
    tags = ("review",)

    @get(
        "/queue",
        operation_id="listReviewQueue",
        **access("review"),
        summary="Review items in the one ranking (forced first by flag severity, then by risk score)",
        description=(
            "Flagged items only by default (forced, tier above rest, or a critical/major/minor flag); scope=all "
            "lists every candidate. status: pending (open or leased, the default), open, leased, reviewed, any."
        ),
    )
    async def queue(
        self,
        review_queue: ReviewQueue,
        tenant: str,
        tier: str | None = None,
        lang: str | None = None,
        model: str | None = None,
        batch: str | None = None,
        item_scope: Literal["flagged", "all"] = Parameter(query="scope", default="flagged"),
        status: Literal["pending", "open", "leased", "reviewed", "any"] = "pending",
        offset: int = Parameter(default=0, ge=0, le=MAX_OFFSET),
        limit: int = Parameter(default=50, ge=1, le=500),
    ) -> QueuePage:
        return await services.queue_page(
            review_queue,
            tenant,
            services.QueueFilters(tier=tier, lang=lang, model=model, batch=batch, scope=item_scope, status=status),
            offset=offset,
            limit=limit,
        )

    @post(
        "/claims",
        operation_id="claimReviewItems",
        **access("review"),
        summary="Lease up to n review items to a reviewer",
        status_code=201,
    )
    async def claim(
        self, request: Request[Any, Any, Any], data: ClaimRequest, review_queue: ReviewQueue, tenant: str
    ) -> LeaseOut:
        who = services.acting_reviewer(principal_of(request), data.reviewer)
        return await services.claim(review_queue, tenant, who, data)

    @post(
        "/claims/{lease_id:str}/renew",
        operation_id="renewReviewLease",
        **access("review"),
        summary="Extend a lease's visibility timeout (its holder, or an admin key)",
        status_code=200,
    )
    async def renew(
        self, request: Request[Any, Any, Any], lease_id: str, data: RenewRequest, review_queue: ReviewQueue, tenant: str
    ) -> LeaseOut:
        who = services.acting_reviewer(principal_of(request), data.reviewer)
        return await services.renew(review_queue, tenant, who, lease_id, data)

    @delete(
        "/claims/{lease_id:str}",
        operation_id="releaseReviewLease",
        **access("review"),
        summary="Release a lease (its holder, or an admin key): its unreviewed items go back to the queue",
        status_code=200,
    )
    async def release(
        self, request: Request[Any, Any, Any], lease_id: str, review_queue: ReviewQueue, tenant: str
    ) -> ReleaseOut:
        return await services.release(review_queue, tenant, services.acting_reviewer(principal_of(request)), lease_id)

    @get(
        "/items/{item_id:str}",
        operation_id="getReviewItem",
        **access("review"),
        summary="One item with source, candidate, peers, signals, flags, judge answers, risk, budget and verdicts",
    )
    async def item(
        self, item_id: str, review_queue: ReviewQueue, store: Store, db: DurableStore, tenant: str
    ) -> ReviewItemOut:
        return await services.item_detail(review_queue, store, db, tenant, item_id)

    @post(
        "/items/{item_id:str}/verdict",
        operation_id="recordVerdict",
        **access("review"),
        summary=(
            "Record a verdict (VALID, MINOR or MAJOR) with the reviewer's word on each finding and the errors she "
            "marked; a further verdict is kept as another opinion"
        ),
        description=(
            "The reviewer is the key's. An unreviewed item under a live lease takes a verdict only citing that lease, "
            "held by this key (409 for a lease that does not hold the item, 403 for another reviewer's). A retry is "
            "recognised by its lease or by its Idempotency-Key and answers 200 with the verdict stored first."
        ),
        status_code=201,
    )
    async def verdict(
        self,
        request: Request[Any, Any, Any],
        item_id: str,
        data: VerdictRequest,
        review_queue: ReviewQueue,
        store: Store,
        tenant: str,
        idempotency_key: str | None = Parameter(
            header="Idempotency-Key", default=None, max_length=200, description="makes a retried verdict safe"
        ),
    ) -> Response[VerdictOut]:
        who = services.acting_reviewer(principal_of(request), data.reviewer)
        out, replayed = await services.record_verdict(review_queue, store, tenant, who, item_id, data, idempotency_key)
        return Response(out, status_code=200 if replayed else 201)

    @get(
        "/items/{item_id:str}/verdicts",
        operation_id="listVerdicts",
        **access("review"),
        summary="Every verdict on an item, oldest first",
    )
    async def verdicts(self, item_id: str, db: DurableStore, tenant: str) -> list[VerdictOut]:
        rows = await asyncio.to_thread(db.verdicts, tenant, item_id)
        return [services.verdict_out(v) for v in rows]


class VerdictExportController(Controller):
    path = "/v1/exports"
    tags = ("review",)

    @get(
        "/verdicts",
        operation_id="exportVerdicts",
        **access("review"),
        summary=(
            "The tenant's verdicts given in [since, until) as NDJSON, oldest first: labels, the reviewer's word on "
            "each finding, the spans she marked, timing, and which verdict replaced which"
        ),
        media_type="application/x-ndjson",
    )
    async def verdicts(
        self,
        db: DurableStore,
        tenant: str,
        since: float = Parameter(default=0.0, description="epoch seconds, inclusive"),
        until: float | None = Parameter(default=None, description="epoch seconds, exclusive (default: now)"),
    ) -> Stream:
        since, end = window(since, until)
        rows = await asyncio.to_thread(db.verdicts, tenant)

        async def lines() -> AsyncIterator[bytes]:
            for v in rows:
                if since <= v.created_at < end:
                    yield _enc.encode(services.verdict_out(v)) + b"\n"

        return Stream(lines(), media_type="application/x-ndjson")


class AdjudicationController(Controller):
    path = "/v1/adjudications"
    tags = ("review",)

    @post(
        operation_id="createAdjudication",
        **access("review"),
        summary="Label a candidate with the reference-aided three-judge panel (calibration only)",
        description=(
            "Three judges see source, reference (as an aid) and candidate and each say error yes/no and minor/major; "
            "ERROR if >= 2 say error, MAJOR if >= 2 say major, else MINOR. Stored apart from human verdicts. The "
            "panel runs on a worker: the answer is the record with status pending; poll GET /v1/adjudications/{id}. "
            "Without an LLM provider (or with too few eligible judges) the record is stored at once with status "
            "skipped and the reason; with judges that gave no valid answer and could change the outcome it is "
            "inconclusive (no label)."
        ),
        status_code=202,
    )
    async def create(
        self,
        data: AdjudicationRequest,
        settings: Settings,
        review_queue: ReviewQueue,
        store: Store,
        db: DurableStore,
        jobs: JobQueue,
        tenant: str,
    ) -> AdjudicationOut:
        return await services.adjudicate(settings, review_queue, store, db, jobs, tenant, data)

    @get(
        "/{adjudication_id:str}", operation_id="getAdjudication", **access("review"), summary="One adjudication record"
    )
    async def read(self, adjudication_id: str, store: Store, db: DurableStore, tenant: str) -> AdjudicationOut:
        return await services.adjudication(store, db, tenant, adjudication_id)

    @get(
        operation_id="listAdjudications",
        **access("review"),
        summary="Stored adjudication records, oldest first (optionally of one item)",
    )
    async def list_all(self, db: DurableStore, tenant: str, item_id: str | None = None) -> list[AdjudicationOut]:
        return await services.adjudications(db, tenant, item_id)
