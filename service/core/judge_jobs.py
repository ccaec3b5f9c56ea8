"""Companion judge work that runs on the workers (Poller evaluations, MATA grades, multiple-choice runs): the plan as
validated at submission and the result written once, in Redis under the tenant with the assessments' retention.

  trisk:t:{tenant}:jj:{kind}:{id}   hash: meta, plan, result, started, failed

Each kind has its plan and result types (``KINDS``); the job of a kind is ``judge_<kind>`` (workers/jobs.py). Like
assessment jobs, a job re-reads what is stored: a result written once (HSETNX) is never computed again.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from service.core.errors import NotFound
from service.core.llm import CallGuard, Endpoint
from service.core.mata import GradeOutcome, GradePlan, McqRunOutcome, McqRunRequest, run_grades, run_mcq
from service.core.poller import PollerEvaluation, PollerPlan, run_poller_evaluation
from service.core.settings import LLMSettings

__all__ = ["KINDS", "JobKind", "JudgeJob", "JudgeJobStore", "JudgeStatus", "run_judge_job"]

JobKind = Literal["poller", "grades", "mcq"]
JudgeStatus = Literal["pending", "running", "done", "failed"]
# kind -> (plan type, result type)
KINDS: dict[str, tuple[Any, Any]] = {
    "poller": (PollerPlan, PollerEvaluation),
    "grades": (GradePlan, list[GradeOutcome]),
    "mcq": (McqRunRequest, McqRunOutcome),
}
_enc = msgspec.json.Encoder()


class _Meta(msgspec.Struct):
    id: str
    tenant: str
    kind: str
    created_at: float


@dataclass
class JudgeJob:
    id: str
    tenant: str
    kind: str
    created_at: float
    plan: Any
    result: Any = None
    started: bool = False
    failed: str | None = None

    @property
    def status(self) -> JudgeStatus:
        if self.failed is not None:
            return "failed"
        if self.result is not None:
            return "done"
        return "running" if self.started else "pending"


class JudgeJobStore:
    def __init__(self, redis: Any, *, retention_seconds: int) -> None:
        self.redis = redis
        self.ttl = retention_seconds if retention_seconds > 0 else None

    @staticmethod
    def _key(tenant: str, kind: str, jid: str) -> str:
        return f"trisk:t:{tenant}:jj:{kind}:{jid}"

    async def create(self, tenant: str, kind: JobKind, plan: Any, result: Any = None) -> JudgeJob:
        """Store a new job (with its result already, when nothing has to run: no provider configured)."""
        job = JudgeJob(id=uuid.uuid4().hex, tenant=tenant, kind=kind, created_at=time.time(), plan=plan, result=result)
        key = self._key(tenant, kind, job.id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "meta", _enc.encode(_Meta(job.id, tenant, kind, job.created_at)))
            pipe.hset(key, "plan", _enc.encode(plan))
            if result is not None:
                pipe.hset(key, "result", _enc.encode(result))
            if self.ttl:
                pipe.expire(key, self.ttl)
            await pipe.execute()
        return job

    async def get(self, tenant: str, kind: JobKind, jid: str) -> JudgeJob:
        fields = await self.redis.hgetall(self._key(tenant, kind, jid))
        if not fields or b"meta" not in fields:
            raise NotFound(f"no {kind} job {jid!r}")
        plan_type, result_type = KINDS[kind]
        meta = msgspec.json.decode(fields[b"meta"], type=_Meta)
        return JudgeJob(
            id=meta.id,
            tenant=meta.tenant,
            kind=meta.kind,
            created_at=meta.created_at,
            plan=msgspec.json.decode(fields[b"plan"], type=plan_type),
            result=msgspec.json.decode(fields[b"result"], type=result_type) if b"result" in fields else None,
            started=b"started" in fields,
            failed=fields[b"failed"].decode() if b"failed" in fields else None,
        )

    async def mark_started(self, tenant: str, kind: JobKind, jid: str) -> None:
        await self.redis.hset(self._key(tenant, kind, jid), "started", b"1")

    async def put_result(self, tenant: str, kind: JobKind, jid: str, result: Any) -> bool:
        """Write the result once; False when another delivery wrote it first (its result stands)."""
        return bool(await self.redis.hsetnx(self._key(tenant, kind, jid), "result", _enc.encode(result)))

    async def mark_failed(self, tenant: str, kind: JobKind, jid: str, reason: str) -> None:
        await self.redis.hset(self._key(tenant, kind, jid), "failed", reason.encode())


async def run_judge_job(kind: str, client: Any, plan: Any, settings: LLMSettings) -> Any:
    """The work of one job (also run in the API when no provider is configured: then nothing is called and every
    item reads skipped with the reason), bounded by the LLM deadline: what did not answer in time reads timed_out."""
    guard = CallGuard.from_settings(settings)
    if kind == "poller":
        return await run_poller_evaluation(client, plan, settings, guard)
    if kind == "grades":
        return await run_grades(client, plan, settings, guard)
    if kind == "mcq":
        endpoint = Endpoint(base_url=settings.base_url, api_key=settings.api_key, model=plan.model)
        return await run_mcq(client, endpoint, plan, settings, guard)
    raise ValueError(f"unknown judge job kind {kind!r}")
