"""Liveness, readiness and the workers' heartbeats for ops.

Ready (``/health/ready``, the API pods' readiness probe) means this pod can serve: the novelty index loaded, Redis
reachable, not evicting and below MEMORY_READY_FRACTION of its maxmemory (a full Redis refuses submissions), the
durable store answering and taking writes (no write refused within STORE_REFUSAL_SECONDS: a full disk answers the
ping and every submission with 503). Whether any worker is alive is *not* part of it but of
``/health/workers`` (503 without a live worker), for alerting: readiness decides whether a pod gets traffic, and no
API pod is the cure for a missing worker. With workers in readiness, a worker rollout (``Recreate``: no worker for
its drain and start) or a crashed worker Deployment would take every API pod out of the Service, and with it novelty,
reads, the review queue and verdicts, which need no worker; submissions queue safely in Redis meanwhile and run when a
worker is back. ``/v1/workers`` (admin) adds what each worker would judge with, read from its heartbeat: the API pod
itself holds neither the LLM key nor egress to the provider.
"""

from __future__ import annotations

import time
from typing import Any

import msgspec
from litestar import Controller, Request, Response, get
from litestar.openapi import ResponseSpec

from service.app.auth import access, require_operator
from service.app.health.services import (
    Check,
    WorkersReport,
    index_check,
    redis_check,
    redis_memory_check,
    redis_policy_check,
    store_check,
    workers_report,
)
from service.app.problems import PROBLEM_JSON
from service.app.resources import Resources
from service.state.worker_registry import WorkerRecord

__all__ = ["HealthController", "WorkerController"]


class Live(msgspec.Struct, forbid_unknown_fields=True):
    status: str
    uptime_seconds: float


class Ready(msgspec.Struct, forbid_unknown_fields=True):
    status: str
    checks: dict[str, Check]


class WorkersDetail(msgspec.Struct, forbid_unknown_fields=True):
    report: WorkersReport
    # each live worker's own record: release, state, and its capabilities (judge configuration with the provider's
    # URL redacted, the index it loaded, its encoders)
    workers: list[WorkerRecord]


def _not_ready(container: type, what: str) -> dict[int, ResponseSpec]:
    return {
        503: ResponseSpec(
            data_container=container,
            description=what,
            media_type=PROBLEM_JSON,
            generate_examples=False,
        )
    }


class HealthController(Controller):
    path = "/health"
    tags = ["health"]

    @get("/live", operation_id="healthLive", summary="The process is up", sync_to_thread=False)
    def live(self, request: Request[Any, Any, Any]) -> Live:
        resources: Resources = request.app.state.resources
        return Live(status="ok", uptime_seconds=round(time.time() - resources.started_at, 3))

    @get(
        "/ready",
        operation_id="healthReady",
        summary="Ready to serve: novelty index loaded, Redis reachable, not evicting and below 90% of its maxmemory, "
        "the durable store answering and taking writes",
        responses=_not_ready(Ready, "not ready: the checks say which part is missing"),
    )
    async def ready(self, request: Request[Any, Any, Any]) -> Response[Ready]:
        resources: Resources = request.app.state.resources
        checks: dict[str, Check] = {"index": index_check(resources), "redis": await redis_check(resources)}
        if checks["redis"].ok:
            checks["redis_policy"] = await redis_policy_check(resources)
            checks["redis_memory"] = await redis_memory_check(resources)
        checks["store"] = await store_check(resources)
        ok = all(c.ok for c in checks.values())
        body = Ready(status="ready" if ok else "not_ready", checks=checks)
        return Response(body, status_code=200 if ok else 503, media_type="application/json" if ok else PROBLEM_JSON)

    @get(
        "/workers",
        operation_id="healthWorkers",
        summary="Live workers from their heartbeats (for alerting; not part of readiness)",
        description=(
            "200 when at least one worker of this API's queue has a live heartbeat and none has a problem (no index, "
            "another index than the API's, workers of two releases at once); 503 otherwise, with the problems."
        ),
        responses=_not_ready(WorkersReport, "no live worker, a problem with one, or Redis not readable"),
    )
    async def workers(self, request: Request[Any, Any, Any]) -> Response[WorkersReport]:
        report, _ = await workers_report(request.app.state.resources)
        ok = report.status == "ok"
        return Response(report, status_code=200 if ok else 503, media_type="application/json" if ok else PROBLEM_JSON)


class WorkerController(Controller):
    path = "/v1/workers"
    tags = ["ops"]

    @get(
        operation_id="listWorkers",
        **access("admin"),
        summary="Live workers with their capabilities: judge configuration, index, encoders (from their heartbeats); "
        "an operator tenant's admin only",
    )
    async def list_workers(self, resources: Resources, request: Request[Any, Any, Any]) -> WorkersDetail:
        require_operator(request, resources.settings, "the workers serve every tenant")
        report, records = await workers_report(resources)
        return WorkersDetail(report=report, workers=records)
