"""Companion judge work that runs on the workers (Poller evaluations, MATA grades, multiple-choice runs): the plan as
validated at submission and the result written once, rows of the durable store (``judge_jobs``: tenant, kind, id,
plan, result, started, failed) kept as long as the assessments (the purge).

Each kind has its plan and result types (``KINDS``); every kind runs as the ARQ job ``judge`` (workers/judge_jobs.py,
which also runs adjudications: service.review.adjudication_jobs). Like
assessment jobs, a job re-reads what is stored: a result written once (UPDATE ... WHERE result IS NULL) is never
computed again.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal

import msgspec

from service.companions.mata import GradeOutcome, GradePlan, McqRunOutcome, McqRunRequest, run_grades, run_mcq
from service.companions.poller import PollerEvaluation, PollerPlan, run_poller_evaluation
from service.core.judges.llm import CallGuard, Endpoint
from service.platform.errors import NotFound
from service.platform.settings import LLMSettings
from service.state.durable.packing import pack, unpack

__all__ = [
    "KINDS",
    "JobKind",
    "JudgeJob",
    "JudgeJobStore",
    "JudgeStatus",
    "job_id_of",
    "run_judge_job",
    "submit_judge_job",
]

JobKind = Literal["poller", "grades", "mcq"]
JudgeStatus = Literal["pending", "running", "done", "failed"]
# kind -> (plan type, result type)
KINDS: dict[str, tuple[Any, Any]] = {
    "poller": (PollerPlan, PollerEvaluation),
    "grades": (GradePlan, list[GradeOutcome]),
    "mcq": (McqRunRequest, McqRunOutcome),
}


def job_id_of(kind: str, jid: str) -> str:
    """The ``judge`` job's fixed id (the API's and the reconciler's)."""
    return f"jj:{kind}:{jid}"


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
    def __init__(self, redis: Any, *, retention_seconds: int, db: Any = None) -> None:
        from service.state.durable.records_store import RecordStore
        from service.state.store import Store

        self.redis = redis
        self.ttl = retention_seconds if retention_seconds > 0 else None
        self.records: RecordStore = Store(redis, retention_seconds=retention_seconds, db=db).records

    async def create(self, tenant: str, kind: JobKind, plan: Any, result: Any = None) -> JudgeJob:
        """Store a new job (with its result already, when nothing has to run: no provider configured)."""
        job = JudgeJob(id=uuid.uuid4().hex, tenant=tenant, kind=kind, created_at=time.time(), plan=plan, result=result)
        values = {"tenant": tenant, "kind": kind, "id": job.id, "created_at": job.created_at, "plan": pack(plan)}
        if result is not None:
            values["result"] = pack(result)
        await asyncio.to_thread(self.records.create_judge_job, values)
        return job

    async def get(self, tenant: str, kind: JobKind, jid: str) -> JudgeJob:
        row = await asyncio.to_thread(self.records.get_judge_job, tenant, kind, jid)
        if row is None:
            raise NotFound(f"no {kind} job {jid!r}")
        plan_type, result_type = KINDS[kind]
        try:
            plan = unpack(row.plan, plan_type)
            result = unpack(row.result, result_type) if row.result is not None else None
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            raise NotFound(f"{kind} job {jid!r} is stored in a format this version cannot read ({exc})") from exc
        return JudgeJob(
            id=row.id,
            tenant=row.tenant,
            kind=row.kind,
            created_at=float(row.created_at),
            plan=plan,
            result=result,
            started=row.started_at is not None,
            failed=row.failed,
        )

    async def mark_started(self, tenant: str, kind: JobKind, jid: str) -> None:
        await asyncio.to_thread(self.records.update_judge_job, tenant, kind, jid, {"started_at": time.time()})

    async def put_result(self, tenant: str, kind: JobKind, jid: str, result: Any) -> bool:
        """Write the result once; False when another delivery wrote it first (its result stands)."""
        from service.state.durable.schema import judge_jobs

        values = {"result": pack(result), "todo": 0}
        return await asyncio.to_thread(
            self.records.update_judge_job, tenant, kind, jid, values, judge_jobs.c.result.is_(None)
        )

    async def mark_failed(self, tenant: str, kind: JobKind, jid: str, reason: str) -> None:
        values = {"failed": reason, "todo": 0}
        await asyncio.to_thread(self.records.update_judge_job, tenant, kind, jid, values)


async def submit_judge_job(judge_store: JudgeJobStore, jobs: Any, tenant: str, kind: JobKind, plan: Any) -> JudgeJob:
    """The API's side: keep a validated plan for a worker and queue its ``judge`` job (``jobs.enqueue(function,
    *args, job_id=...)``); the worker decides whether judges are asked (it holds the provider; without one every item
    reads skipped with the reason)."""
    job = await judge_store.create(tenant, kind, plan)
    await jobs.enqueue("judge", tenant, kind, job.id, job_id=job_id_of(kind, job.id))
    return job


async def run_judge_job(
    kind: str, client: Any, plan: Any, settings: LLMSettings, guard: CallGuard | None = None
) -> Any:
    """The work of one job (nothing is called without a provider: every item reads skipped with the reason),
    bounded by the LLM deadline (``guard``, else one from the settings): what did not answer in time reads
    timed_out."""
    guard = guard if guard is not None else CallGuard.from_settings(settings)
    if kind == "poller":
        return await run_poller_evaluation(client, plan, settings, guard)
    if kind == "grades":
        return await run_grades(client, plan, settings, guard)
    if kind == "mcq":
        endpoint = Endpoint(base_url=settings.base_url, api_key=settings.api_key, model=plan.model)
        return await run_mcq(client, endpoint, plan, settings, guard)
    raise ValueError(f"unknown judge job kind {kind!r}")
