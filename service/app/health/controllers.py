"""Liveness and readiness for ops: ready means the novelty index is loaded and Redis answers."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
from litestar import Controller, Request, Response, get
from litestar.openapi import ResponseSpec

from service.app.problems import PROBLEM_JSON
from service.app.resources import Resources

__all__ = ["HealthController"]


class Live(msgspec.Struct):
    status: str
    uptime_seconds: float


class Check(msgspec.Struct):
    ok: bool
    detail: str


class Ready(msgspec.Struct):
    status: str
    checks: dict[str, Check]


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
        summary="Ready to serve: novelty index loaded and Redis reachable",
        responses={
            503: ResponseSpec(
                data_container=Ready,
                description="not ready: the checks say which part is missing",
                media_type=PROBLEM_JSON,
                generate_examples=False,
            )
        },
    )
    async def ready(self, request: Request[Any, Any, Any]) -> Response[Ready]:
        resources: Resources = request.app.state.resources
        checks: dict[str, Check] = {}
        if resources.indexes:
            detail = ", ".join(
                f"{lang}: {len(ix)} passages, signature {ix.signature_id}" for lang, ix in resources.indexes.items()
            )
            checks["index"] = Check(ok=True, detail=detail)
        else:
            checks["index"] = Check(ok=False, detail="; ".join(resources.index_errors.values()) or "no index loaded")
        checks["redis"] = await _redis_check(resources)
        ok = all(c.ok for c in checks.values())
        body = Ready(status="ready" if ok else "not_ready", checks=checks)
        return Response(body, status_code=200 if ok else 503, media_type="application/json" if ok else PROBLEM_JSON)


async def _redis_check(resources: Resources) -> Check:
    if resources.redis is None:
        return Check(ok=False, detail="no Redis client")
    try:
        await asyncio.wait_for(resources.redis.ping(), timeout=1.0)
    except Exception as exc:  # any failure means not ready; say which
        return Check(ok=False, detail=f"Redis at {resources.settings.redis.url} unreachable: {type(exc).__name__}")
    return Check(ok=True, detail="PONG")
