"""``/v1/review`` (queue, claims, verdicts, item detail) and ``/v1/adjudications`` (reference-aided panel labels)."""

from __future__ import annotations

import asyncio
from typing import Any, Literal

from litestar import Controller, Request, delete, get, post
from litestar.params import Parameter

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
from service.app.tenancy import current_tenant
from service.core.review import get_review_settings

__all__ = ["AdjudicationController", "ReviewController"]


class ReviewController(Controller):
    path = "/v1/review"
    tags = ("review",)

    @get(
        "/queue",
        operation_id="listReviewQueue",
        summary="Review items in budget order (forced first, then by budget percentile)",
        description=(
            "Flagged items only by default (forced, tier above rest, or a critical/major/minor flag); scope=all "
            "lists every candidate. status: pending (open or leased, the default), open, leased, reviewed, any."
        ),
    )
    async def queue(
        self,
        request: Request[Any, Any, Any],
        tier: str | None = None,
        lang: str | None = None,
        model: str | None = None,
        batch: str | None = None,
        item_scope: Literal["flagged", "all"] = Parameter(query="scope", default="flagged"),
        status: Literal["pending", "open", "leased", "reviewed", "any"] = "pending",
        offset: int = Parameter(default=0, ge=0),
        limit: int = Parameter(default=50, ge=1, le=500),
    ) -> QueuePage:
        tenant = current_tenant(request)
        queue = services.queue_of(request.app.state.resources)
        filters = {k: v for k, v in {"tier": tier, "lang": lang, "model": model, "batch_id": batch}.items() if v}
        rows, total = await queue.list(
            tenant, filters=filters, flagged_only=item_scope == "flagged", status=status, offset=offset, limit=limit
        )
        items = [services.item_out(it, st, n, lease) for it, st, n, lease in rows]
        nxt = offset + limit if offset + limit < total else None
        return QueuePage(items=items, total=total, offset=offset, limit=limit, next_offset=nxt)

    @post(
        "/claims", operation_id="claimReviewItems", summary="Lease up to n review items to a reviewer", status_code=201
    )
    async def claim(self, request: Request[Any, Any, Any], data: ClaimRequest) -> LeaseOut:
        return await services.claim(request.app.state.resources, current_tenant(request), data)

    @post(
        "/claims/{lease_id:str}/renew",
        operation_id="renewReviewLease",
        summary="Extend a lease's visibility timeout",
        status_code=200,
    )
    async def renew(self, request: Request[Any, Any, Any], lease_id: str, data: RenewRequest) -> LeaseOut:
        resources = request.app.state.resources
        tenant = current_tenant(request)
        queue = services.queue_of(resources)
        lease = await queue.renew(
            tenant, lease_id, data.reviewer, data.lease_seconds or get_review_settings().lease_seconds
        )
        items = [services.item_out(await queue.item(tenant, i), "leased", 0, lease.id) for i in lease.items]
        return LeaseOut(lease.id, lease.reviewer, lease.expires_at, lease.created_at, items)

    @delete(
        "/claims/{lease_id:str}",
        operation_id="releaseReviewLease",
        summary="Release a lease: its unreviewed items go back to the queue",
        status_code=200,
    )
    async def release(self, request: Request[Any, Any, Any], lease_id: str) -> ReleaseOut:
        queue = services.queue_of(request.app.state.resources)
        released = await queue.release(current_tenant(request), lease_id)
        return ReleaseOut(lease_id=lease_id, released=released)

    @get(
        "/items/{item_id:str}",
        operation_id="getReviewItem",
        summary="One item with source, candidate, peers, signals, flags, judge answers, risk, budget and verdicts",
    )
    async def item(self, request: Request[Any, Any, Any], item_id: str) -> ReviewItemOut:
        return await services.item_detail(request.app.state.resources, current_tenant(request), item_id)

    @post(
        "/items/{item_id:str}/verdict",
        operation_id="recordVerdict",
        summary="Record a verdict (VALID, MINOR or MAJOR); a further verdict is kept as another opinion",
        status_code=201,
    )
    async def verdict(self, request: Request[Any, Any, Any], item_id: str, data: VerdictRequest) -> VerdictOut:
        return await services.record_verdict(request.app.state.resources, current_tenant(request), item_id, data)

    @get("/items/{item_id:str}/verdicts", operation_id="listVerdicts", summary="Every verdict on an item, oldest first")
    async def verdicts(self, request: Request[Any, Any, Any], item_id: str) -> list[VerdictOut]:
        tenant = current_tenant(request)
        rows = await asyncio.to_thread(services.review_db().verdicts, tenant, item_id)
        return [services.verdict_out(v) for v in rows]


class AdjudicationController(Controller):
    path = "/v1/adjudications"
    tags = ("review",)

    @post(
        operation_id="createAdjudication",
        summary="Label a candidate with the reference-aided three-judge panel (calibration only)",
        description=(
            "Three judges see source, reference (as an aid) and candidate and each say error yes/no and minor/major; "
            "ERROR if >= 2 say error, MAJOR if >= 2 say major, else MINOR. Stored apart from human verdicts. Without "
            "an LLM provider the record is stored with status skipped and the reason; with judges that gave no "
            "valid answer and could change the outcome it is inconclusive (no label)."
        ),
        status_code=201,
    )
    async def create(self, request: Request[Any, Any, Any], data: AdjudicationRequest) -> AdjudicationOut:
        return await services.adjudicate(request.app.state.resources, current_tenant(request), data)

    @get("/{adjudication_id:str}", operation_id="getAdjudication", summary="One adjudication record")
    async def read(self, request: Request[Any, Any, Any], adjudication_id: str) -> AdjudicationOut:
        return await services.adjudication(current_tenant(request), adjudication_id)

    @get(operation_id="listAdjudications", summary="Adjudication records, oldest first (optionally of one item)")
    async def list_all(self, request: Request[Any, Any, Any], item_id: str | None = None) -> list[AdjudicationOut]:
        return await services.adjudications(current_tenant(request), item_id)
