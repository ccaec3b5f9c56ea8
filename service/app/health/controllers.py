"""Liveness and readiness for ops: ready means the novelty index is loaded and Redis answers without evicting."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import msgspec
import redis.exceptions
from litestar import Controller, Request, Response, get
from litestar.openapi import ResponseSpec

from service.app.problems import PROBLEM_JSON
from service.app.resources import Resources

__all__ = ["HealthController"]

# the one maxmemory-policy that never drops a key: every trisk key has a TTL (the retention), so the volatile-*
# policies would evict assessments and queued jobs as surely as the allkeys-* ones
SAFE_POLICY = "noeviction"


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
        summary="Ready to serve: novelty index loaded, Redis reachable and not evicting",
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
        if checks["redis"].ok:
            checks["redis_policy"] = await _redis_policy_check(resources)
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


async def _redis_policy_check(resources: Resources) -> Check:
    """Fails on a Redis that may evict keys when full (it would drop jobs and assessments silently); a provider that
    disables CONFIG leaves the policy unknown, which does not fail readiness."""
    assert resources.redis is not None
    try:
        got = await asyncio.wait_for(resources.redis.config_get("maxmemory-policy"), timeout=1.0)
    except redis.exceptions.ResponseError as exc:  # CONFIG renamed, disabled or not allowed for this user
        return Check(ok=True, detail=f"maxmemory-policy unknown (CONFIG GET refused: {exc}); it must be {SAFE_POLICY}")
    except Exception as exc:  # gone since the ping: the next probe says so
        return Check(ok=False, detail=f"maxmemory-policy not read: {type(exc).__name__}")
    policy = got.get("maxmemory-policy")
    if not policy:
        return Check(ok=True, detail=f"maxmemory-policy unknown (CONFIG GET said nothing); it must be {SAFE_POLICY}")
    if policy != SAFE_POLICY:
        return Check(
            ok=False,
            detail=f"maxmemory-policy is {policy}: a full Redis would evict assessments and queued jobs; "
            f"set {SAFE_POLICY}",
        )
    return Check(ok=True, detail=f"maxmemory-policy {policy}")
