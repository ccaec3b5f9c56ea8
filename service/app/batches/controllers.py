"""``/v1/batches``: many passages in one request (JSON or NDJSON), progress counts, results as NDJSON."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.response import Stream

from service.app.assessments.schemas import BatchAccepted, BatchOut, BatchRequest
from service.app.assessments.services import accept_batch
from service.app.auth import access
from service.app.batches.services import batch_progress
from service.app.deps import JobQueue
from service.app.middleware import NDJSON_BODY
from service.core.records import AssessmentRequest
from service.platform.errors import InputError
from service.platform.settings import Settings
from service.state.store import Store
from service.state.views import render_assessment

__all__ = ["BatchController"]

_item_dec = msgspec.json.Decoder(AssessmentRequest)
_enc = msgspec.json.Encoder()


def _parse_ndjson(body: bytes) -> list[AssessmentRequest]:
    items = []
    for n, line in enumerate(body.splitlines(), 1):
        if not line.strip():
            continue
        try:
            items.append(_item_dec.decode(line))
        except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
            raise InputError(f"line {n}: {exc}", extra={"line": n}) from exc
    return items


def _accepted(batch: Any) -> Response[BatchAccepted]:
    out = BatchAccepted(
        id=batch.id, status="pending", total=len(batch.assessment_ids), assessment_ids=batch.assessment_ids
    )
    return Response(out, status_code=202, headers={"Location": f"/v1/batches/{batch.id}"})


class BatchController(Controller):
    path = "/v1/batches"
    tags = ["batches"]

    @post(
        operation_id="createBatch", **access("submit"), summary="Assess many passages in one request", status_code=202
    )
    async def create(
        self, data: BatchRequest, settings: Settings, store: Store, jobs: JobQueue, tenant: str
    ) -> Response[BatchAccepted]:
        return _accepted(await accept_batch(settings, store, jobs, tenant, data.items))

    @post(
        "/ndjson",
        operation_id="createBatchNdjson",
        **access("submit"),
        summary="Assess many passages uploaded as NDJSON (one assessment request per line)",
        status_code=202,
        body_media_type=NDJSON_BODY,  # service.app.middleware: another Content-Type is a 415
    )
    async def create_ndjson(
        self, request: Request[Any, Any, Any], settings: Settings, store: Store, jobs: JobQueue, tenant: str
    ) -> Response[BatchAccepted]:
        items = _parse_ndjson(await request.body())
        return _accepted(await accept_batch(settings, store, jobs, tenant, items))

    @get("/{batch_id:str}", operation_id="getBatch", **access("read"), summary="A batch's progress counts")
    async def read(self, batch_id: str, store: Store, tenant: str) -> BatchOut:
        return await batch_progress(store, tenant, batch_id)

    @delete(
        "/{batch_id:str}",
        operation_id="deleteBatch",
        **access("submit"),
        summary="Delete a batch and every assessment of it (texts, results, review items; verdicts keep their label)",
        status_code=204,
    )
    async def remove(self, batch_id: str, store: Store, tenant: str) -> None:
        batch = await store.get_batch(tenant, batch_id)  # NotFound for another tenant's or no batch
        await store.forget_assessments(tenant, batch.assessment_ids, batch_id)

    @get(
        "/{batch_id:str}/results",
        operation_id="getBatchResults",
        **access("read"),
        summary="A batch's assessments as NDJSON, one per line, in submission order",
        media_type="application/x-ndjson",
    )
    async def results(self, batch_id: str, store: Store, tenant: str) -> Stream:
        batch = await store.get_batch(tenant, batch_id)

        async def lines() -> AsyncIterator[bytes]:
            ids = batch.assessment_ids
            for lo in range(0, len(ids), 200):
                for aid, state in zip(
                    ids[lo : lo + 200], await store.get_many(tenant, ids[lo : lo + 200]), strict=True
                ):
                    row: Any = render_assessment(state) if state is not None else {"id": aid, "status": "expired"}
                    yield _enc.encode(row) + b"\n"

        return Stream(lines(), media_type="application/x-ndjson")
