"""Judge jobs: ``judge`` (Poller evaluations, MATA grades, multiple-choice runs: service.companions.judge_jobs) and
``adjudicate`` (reference-aided adjudications: service.review.adjudication_jobs), one judge-job kind each.

Every kind runs the same way (``_run``): a job that finds its result stored (or its failure) does nothing; a delivery
beyond the last try (its worker was lost) reads failed; otherwise the kind's one core step runs with the worker's
LLM client charged to the tenant's daily budget and within the LLM deadline, and its result is stored once. A
transient failure is retried with a growing delay, anything else or the last try reads failed with the reason, and
so does a job stopped by ARQ's job timeout (workers/policy.py).
"""

from __future__ import annotations

import asyncio
from typing import Any, cast

from service.companions.judge_jobs import JobKind, JudgeJobStore, run_judge_job
from service.core.judges.llm import CallGuard
from service.platform.errors import NotFound
from service.platform.telemetry import CHECK_FAILURES
from service.review import adjudication_jobs
from service.state.durable import Adjudication
from workers.context import WorkerContext
from workers.policy import JOB_POLICY, guarded, observed, reason

__all__ = ["AdjudicationKind", "CompanionKind", "JudgeKind", "adjudicate", "judge"]

TIMED_OUT = "the judge job was stopped by its job timeout"


class JudgeKind:
    """What differs between judge jobs: where the plan and the result live, and the one core step in between."""

    kind: str  # its rows' kind in judge_jobs
    label: str  # the job's name in logs and metrics

    async def load(self, w: WorkerContext, tenant: str, jid: str) -> tuple[str | None, Any]:
        """``(outcome, None)`` when there is nothing to do (gone, already finished), else ``(None, plan)``."""
        raise NotImplementedError

    async def run(self, w: WorkerContext, tenant: str, plan: Any, guard: CallGuard) -> Any:
        raise NotImplementedError

    async def store(self, w: WorkerContext, tenant: str, jid: str, result: Any) -> str:
        """Store the result once; the job's outcome."""
        raise NotImplementedError

    def _rows(self, w: WorkerContext) -> JudgeJobStore:
        # the judge jobs' rows live in the assessments' durable store
        return JudgeJobStore(w.redis_client, retention_seconds=w.settings.redis.retention_seconds, db=w.store.db)

    async def start(self, w: WorkerContext, tenant: str, jid: str) -> None:
        await self._rows(w).mark_started(tenant, cast("JobKind", self.kind), jid)

    async def fail(self, w: WorkerContext, tenant: str, jid: str, why: str) -> None:
        await self._rows(w).mark_failed(tenant, cast("JobKind", self.kind), jid, why)


class CompanionKind(JudgeKind):
    """A Poller evaluation, MATA grades or a multiple-choice run: plan and result in the judge job's row."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.label = f"judge_{kind}"

    async def load(self, w: WorkerContext, tenant: str, jid: str) -> tuple[str | None, Any]:
        try:
            job = await self._rows(w).get(tenant, cast("JobKind", self.kind), jid)
        except NotFound:
            return "gone", None
        if job.result is not None or job.failed is not None:
            return "already finished", None
        return None, job.plan

    async def run(self, w: WorkerContext, tenant: str, plan: Any, guard: CallGuard) -> Any:
        return await run_judge_job(self.kind, w.llm_for(tenant), plan, w.settings.llm, guard)

    async def store(self, w: WorkerContext, tenant: str, jid: str, result: Any) -> str:
        await self._rows(w).put_result(tenant, cast("JobKind", self.kind), jid, result)
        return "done"


class AdjudicationKind(JudgeKind):
    """A reference-aided adjudication: the pending record in the judge job's row, the record in the durable store."""

    kind = adjudication_jobs.KIND
    label = "adjudicate"

    async def load(self, w: WorkerContext, tenant: str, jid: str) -> tuple[str | None, Any]:
        if await asyncio.to_thread(w.store.db.adjudication, tenant, jid) is not None:
            return "already stored", None
        pending = await adjudication_jobs.pending_adjudication(w.store, tenant, jid)
        if pending is None:
            return "gone", None
        if pending.status == "failed":
            return "already finished", None
        return None, pending

    async def run(self, w: WorkerContext, tenant: str, plan: Adjudication, guard: CallGuard) -> Adjudication:
        return await adjudication_jobs.adjudicate_pending(w.llm_for(tenant), plan, w.settings, guard)

    async def store(self, w: WorkerContext, tenant: str, jid: str, result: Adjudication) -> str:
        await adjudication_jobs.store_adjudication(w.store, result)
        return result.status


ADJUDICATION = AdjudicationKind()


async def _run(w: WorkerContext, tries: int, tenant: str, kind: JudgeKind, jid: str) -> str:
    """One delivery of a judge job of any kind (see the module docstring)."""
    nothing, plan = await kind.load(w, tenant, jid)
    if nothing is not None:
        return nothing
    if JOB_POLICY.lost(tries):
        await kind.fail(w, tenant, jid, JOB_POLICY.gave_up)
        return "gave up"
    await kind.start(w, tenant, jid)

    async def work() -> str:
        result = await kind.run(w, tenant, plan, CallGuard.from_settings(w.settings.llm))
        return await kind.store(w, tenant, jid, result)

    async def failed(exc: Exception) -> str:
        CHECK_FAILURES.labels(kind.label).inc()
        JOB_POLICY.retry(exc, tries, w.retry_delay)
        await kind.fail(w, tenant, jid, reason(exc))
        return "failed"

    return await guarded(
        work(),
        limit=w.llm_job_timeout,
        deadline=w.settings.llm.deadline_seconds,
        on_timeout=lambda: kind.fail(w, tenant, jid, TIMED_OUT),
        on_failure=failed,
    )


@observed(lambda tenant, kind, jid: f"judge_{kind}", subject=1)
async def judge(w: WorkerContext, tries: int, tenant: str, kind: str, jid: str) -> str:
    """A companion judge job (Poller evaluation, MATA grades, multiple-choice run)."""
    return await _run(w, tries, tenant, CompanionKind(kind), jid)


@observed(ADJUDICATION.label)
async def adjudicate(w: WorkerContext, tries: int, tenant: str, adjudication_id: str) -> str:
    """A queued reference-aided adjudication (its ARQ name and arguments as before: queued jobs still resolve)."""
    return await _run(w, tries, tenant, ADJUDICATION, adjudication_id)
