"""``/v1/poller``: evaluations of readers' interpretations by a judge in the author's persona (on the workers), and
agreement of judges with the authors' own scores."""

from __future__ import annotations

import asyncio

import msgspec
from litestar import Controller, Response, get, post

from service.app.auth import access
from service.app.deps import JobQueue
from service.app.resources import Resources
from service.companions.judge_jobs import JudgeJob, JudgeJobStore, JudgeStatus, submit_judge_job
from service.companions.personas.store import PersonaStore
from service.companions.poller import (
    Comparison,
    ItemScores,
    PollerAgreement,
    PollerAgreementRequest,
    PollerEvaluation,
    PollerEvaluationRequest,
    PollerScored,
    ScoreSet,
    panel_scores,
    plan_poller_evaluation,
    poller_agreement,
)
from service.core.metrics import BootstrapOptions
from service.platform.errors import InputError, NotReady
from service.platform.settings import Settings

__all__ = ["PollerController", "PollerEvaluationOut", "StoredAgreementRequest"]


class PollerEvaluationOut(msgspec.Struct):
    """An evaluation: pending until a worker has asked the judges, then per interpretation, judge and dimension the
    score (or the parse failure), the declared role, and statistics across judges."""

    id: str
    status: JudgeStatus
    created_at: float
    result: PollerEvaluation | None = None
    error: str | None = None


class StoredSystem(msgspec.Struct, forbid_unknown_fields=True):
    """A stored evaluation used as one system of the table (its row is named ``name``, default its strategy)."""

    evaluation_id: str
    name: str | None = None


class StoredAgreementRequest(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Agreement of stored evaluations with the authors' scores: the judges' scores of each interpretation are the
    panel means the evaluation stored; interpretation ids are the items' ids."""

    human: list[ItemScores]
    evaluations: list[StoredSystem]
    dimensions: list[str] | None = None
    comparisons: list[Comparison] | None = None
    bootstrap: BootstrapOptions = BootstrapOptions()


def _out(job: JudgeJob) -> PollerEvaluationOut:
    return PollerEvaluationOut(
        id=job.id, status=job.status, created_at=job.created_at, result=job.result, error=job.failed
    )


class PollerController(Controller):
    path = "/v1/poller"
    tags = ["poller"]

    @post(
        "/evaluations",
        operation_id="createPollerEvaluation",
        **access("submit"),
        summary="Score readers' interpretations of a poem with judges in the author's persona (P0-P4)",
        description=(
            "Strategies: P0 no persona; P1 the persona; P2 the persona and 'you wrote this poem, the interpretation "
            "comes from readers'; P3 the persona and 'state your role before you score' (default; the research's "
            "best); P4 = P2 + P3. Answers 202; poll GET /v1/poller/evaluations/{id}. Without an LLM provider every "
            "interpretation reads skipped with the reason."
        ),
        status_code=202,
    )
    async def create(
        self,
        data: PollerEvaluationRequest,
        resources: Resources,
        settings: Settings,
        judge_jobs: JudgeJobStore,
        jobs: JobQueue,
        tenant: str,
    ) -> Response[PollerEvaluationOut]:
        persona = None
        if data.persona_id is not None:
            if resources.db is None:
                raise NotReady("the durable store is not open")
            record = await asyncio.to_thread(PersonaStore(resources.db).get, tenant, data.persona_id)
            persona = record.persona
        panels = settings.risk.panels_dir
        plan = plan_poller_evaluation(data, persona=persona, default_panel=settings.llm.panel, panels_dir=panels)
        job = await submit_judge_job(judge_jobs, jobs, tenant, "poller", plan)
        return Response(_out(job), status_code=202, headers={"Location": f"/v1/poller/evaluations/{job.id}"})

    @get(
        "/evaluations/{evaluation_id:str}",
        operation_id="getPollerEvaluation",
        **access("read"),
        summary="A Poller evaluation: per judge and dimension the score, reason and parse status",
    )
    async def read(self, evaluation_id: str, judge_jobs: JudgeJobStore, tenant: str) -> PollerEvaluationOut:
        return _out(await judge_jobs.get(tenant, "poller", evaluation_id))

    @post(
        "/agreement",
        operation_id="pollerAgreement",
        **access("submit"),
        summary="Judges against the authors per dimension: the research's table, bias, errors, correlations",
        description=(
            "The research's measure is the absolute difference between the judges' mean and the authors' mean per "
            "dimension, averaged over dimensions; also signed bias, per-item mean absolute error, Spearman and "
            "Pearson with bootstrap intervals, n, and error reductions of each strategy against the first."
        ),
        status_code=200,
    )
    async def agreement(self, data: PollerAgreementRequest) -> PollerAgreement:
        return await asyncio.to_thread(poller_agreement, data)

    @post(
        "/agreement/stored",
        operation_id="pollerAgreementOfStoredEvaluations",
        **access("submit"),
        summary="The same agreement, with the judges' scores taken from stored evaluations",
        status_code=200,
    )
    async def agreement_stored(
        self, data: StoredAgreementRequest, judge_jobs: JudgeJobStore, tenant: str
    ) -> PollerAgreement:
        systems = []
        for entry in data.evaluations:
            job = await judge_jobs.get(tenant, "poller", entry.evaluation_id)
            if job.result is None:
                raise InputError(f"evaluation {entry.evaluation_id!r} is {job.status}, not done")
            scored = [
                ItemScores(item_id=i.interpretation_id, scores=panel_scores(i))
                for i in job.result.items
                if isinstance(i, PollerScored)
            ]
            systems.append(ScoreSet(name=entry.name or f"{job.plan.strategy} ({job.id[:8]})", items=scored))
        request = PollerAgreementRequest(
            human=data.human,
            systems=systems,
            dimensions=data.dimensions,
            comparisons=data.comparisons,
            bootstrap=data.bootstrap,
        )
        return await asyncio.to_thread(poller_agreement, request)
