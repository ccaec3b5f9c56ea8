"""``/v1/assessments``: submit a source with candidate translations; read back per-candidate risk when it is done."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import msgspec
from litestar import Controller, Request, Response, delete, get, post
from litestar.params import Parameter
from litestar.response import Stream

from service.app.assessments.schemas import AssessmentOut
from service.app.assessments.services import accept_assessment
from service.app.auth import access
from service.app.deps import JobQueue
from service.app.exports import window
from service.app.resources import Resources
from service.core.records import AssessmentRequest
from service.platform.errors import NotFound
from service.state.store import Store, request_hash
from service.state.views import render_assessment

__all__ = ["AssessmentController", "ExportController"]

_enc = msgspec.json.Encoder()


class AssessmentController(Controller):
    path = "/v1/assessments"
    tags = ["assessments"]

    @post(
        operation_id="createAssessment",
        **access("submit"),
        summary="Assess candidate translations of one source passage",
        description=(
            "Answers 202 at once with the source's novelty; embeddings, peer agreement, length, hard flags, "
            "critical-content checks and (when configured) LLM judges run on workers. Poll GET "
            "/v1/assessments/{id} or give a callback_url. With LLM judges the cheap tier's result is published "
            "first (status `partial`, `llm_tier.status` pending; `risk.basis` says which tiers a risk reflects), "
            'then the final one (`done`); `callback_events` ["cheap", "final"] asks for a callback at each. '
            "Rank candidates by `risk.priority` (descending): forced "
            "candidates first by flag severity, then by risk score. An Idempotency-Key header makes retries safe: "
            "the same key with the same body returns the first assessment; with another body it is a 409."
        ),
        status_code=202,
    )
    async def create(
        self,
        request: Request[Any, Any, Any],
        data: AssessmentRequest,
        resources: Resources,
        store: Store,
        jobs: JobQueue,
        tenant: str,
        idempotency_key: str | None = Parameter(
            header="Idempotency-Key", default=None, max_length=200, description="makes a retried POST safe"
        ),
    ) -> Response[AssessmentOut]:
        body = await request.body()
        state, replayed = await accept_assessment(
            resources, store, jobs, tenant, data, request_hash(body), idempotency_key
        )
        out = render_assessment(state)
        headers = {"Location": f"/v1/assessments/{out.id}"}
        if replayed:
            headers["Idempotent-Replayed"] = "true"
        return Response(out, status_code=202, headers=headers)

    @get(
        "/{assessment_id:str}",
        operation_id="getAssessment",
        **access("read"),
        summary="An assessment's status and results",
    )
    async def read(self, assessment_id: str, store: Store, tenant: str) -> AssessmentOut:
        return render_assessment(await store.get(tenant, assessment_id))

    @delete(
        "/{assessment_id:str}",
        operation_id="deleteAssessment",
        **access("submit"),
        summary="Delete an assessment: its texts, results and review items (verdicts keep label and reference)",
        status_code=204,
    )
    async def remove(self, assessment_id: str, store: Store, tenant: str) -> None:
        if not await store.forget_assessments(tenant, [assessment_id]):
            raise NotFound(f"no assessment {assessment_id!r}")


class ExportController(Controller):
    path = "/v1/exports"
    tags = ["assessments"]

    @get(
        "/assessments",
        operation_id="exportAssessments",
        **access("read"),
        summary="The tenant's assessments created in [since, until) as NDJSON, oldest first, one per line",
        media_type="application/x-ndjson",
    )
    async def assessments(
        self,
        store: Store,
        tenant: str,
        since: float = Parameter(default=0.0, description="epoch seconds, inclusive"),
        until: float | None = Parameter(default=None, description="epoch seconds, exclusive (default: now)"),
    ) -> Stream:
        since, end = window(since, until)

        async def lines() -> AsyncIterator[bytes]:
            async for state in store.export(tenant, since, end):
                yield _enc.encode(render_assessment(state)) + b"\n"

        return Stream(lines(), media_type="application/x-ndjson")
