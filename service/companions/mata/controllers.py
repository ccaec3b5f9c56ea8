"""``/v1/mata``: answers graded against ground truth by a judge panel (on the workers), multiple-choice answers read,
robustness variants made and run, and agreement of judges with human annotators."""

from __future__ import annotations

import asyncio

import msgspec
from litestar import Controller, Response, get, post

from service.app.auth import access
from service.app.deps import JobQueue
from service.companions.judge_jobs import JudgeJob, JudgeJobStore, JudgeStatus, submit_judge_job
from service.companions.mata import (
    GradeBatchRequest,
    GradeOutcome,
    GradeRequest,
    MataAgreement,
    MataAgreementRequest,
    McqAnswerRequest,
    McqReading,
    McqRunOutcome,
    McqRunRequest,
    McqVariant,
    McqVariantsRequest,
    mata_agreement,
    mcq_variants,
    plan_grades,
    read_answer,
    validate_mcq_run,
)
from service.platform.settings import Settings

__all__ = ["GradesOut", "MataController", "McqRunOut"]


class GradesOut(msgspec.Struct):
    """Grades of one or more answers: pending until a worker asked the judges, then per item each judge's verdict,
    reasoning, raw answer and parse status, and the panel verdict (a strict majority, else ``no_majority``)."""

    id: str
    status: JudgeStatus
    created_at: float
    results: list[GradeOutcome] | None = None
    error: str | None = None


class McqRunOut(msgspec.Struct):
    """A multiple-choice run: accuracy per variant and format failures (kept apart from wrong answers)."""

    id: str
    status: JudgeStatus
    created_at: float
    result: McqRunOutcome | None = None
    error: str | None = None


def _grades(job: JudgeJob) -> GradesOut:
    return GradesOut(id=job.id, status=job.status, created_at=job.created_at, results=job.result, error=job.failed)


def _run(job: JudgeJob) -> McqRunOut:
    return McqRunOut(id=job.id, status=job.status, created_at=job.created_at, result=job.result, error=job.failed)


class MataController(Controller):
    path = "/v1/mata"
    tags = ["mata"]

    async def _grade(
        self,
        data: GradeRequest | GradeBatchRequest,
        settings: Settings,
        judge_jobs: JudgeJobStore,
        jobs: JobQueue,
        tenant: str,
    ) -> Response[GradesOut]:
        panels = settings.risk.panels_dir
        plan = plan_grades(data, default_panel=settings.llm.panel, panels_dir=panels)
        job = await submit_judge_job(judge_jobs, jobs, tenant, "grades", plan)
        return Response(_grades(job), status_code=202, headers={"Location": f"/v1/mata/grades/{job.id}"})

    @post(
        "/grades",
        operation_id="createMataGrade",
        **access("submit"),
        summary="Grade one answer against its ground truth (correct/incorrect) with a judge panel",
        description=(
            "language en: a model-graded-fact prompt, the last `GRADE: C` / `GRADE: I` (and `P` with partial_credit) "
            "decides; te: a Telugu prompt answered అవును (yes) or లేదు (no). A format failure is a status of its "
            "own, never a wrong answer. The panel verdict is a strict majority of parsed votes; a tie or too few "
            "parsed votes is no_majority. Answers 202; poll GET /v1/mata/grades/{id}."
        ),
        status_code=202,
    )
    async def grade(
        self, data: GradeRequest, settings: Settings, judge_jobs: JudgeJobStore, jobs: JobQueue, tenant: str
    ) -> Response[GradesOut]:
        return await self._grade(data, settings, judge_jobs, jobs, tenant)

    @post(
        "/grades/batch",
        operation_id="createMataGrades",
        **access("submit"),
        summary="Grade many answers in one job (the batch form of POST /v1/mata/grades)",
        status_code=202,
    )
    async def grade_batch(
        self, data: GradeBatchRequest, settings: Settings, judge_jobs: JudgeJobStore, jobs: JobQueue, tenant: str
    ) -> Response[GradesOut]:
        return await self._grade(data, settings, judge_jobs, jobs, tenant)

    @get("/grades/{grade_id:str}", operation_id="getMataGrades", **access("read"), summary="A grading job's results")
    async def read_grades(self, grade_id: str, judge_jobs: JudgeJobStore, tenant: str) -> GradesOut:
        return _grades(await judge_jobs.get(tenant, "grades", grade_id))

    @post(
        "/mcq-answers",
        operation_id="readMcqAnswer",
        **access("submit"),
        summary="Read a model's multiple-choice answer: the choice, correct or not, or a format failure",
        status_code=200,
    )
    async def mcq_answer(self, data: McqAnswerRequest) -> McqReading:
        return read_answer(data)

    @post(
        "/mcq-variants",
        operation_id="makeMcqVariants",
        **access("submit"),
        summary="Robustness variants of a multiple-choice item: the answer at A..D, 'none of the others' (NE, NR)",
        status_code=200,
    )
    async def variants(self, data: McqVariantsRequest) -> list[McqVariant]:
        return mcq_variants(data.item, language=data.language, none_text=data.none_text, variants=data.variants)

    @post(
        "/mcq-runs",
        operation_id="createMcqRun",
        **access("submit"),
        summary="Ask a model every variant of a set of items: accuracy per variant, format failures",
        description="The model's position-bias and negation-sensitivity profile. Answers 202; poll the run.",
        status_code=202,
    )
    async def mcq_run(
        self, data: McqRunRequest, settings: Settings, judge_jobs: JudgeJobStore, jobs: JobQueue, tenant: str
    ) -> Response[McqRunOut]:
        validate_mcq_run(data, max_tokens_cap=settings.llm.max_tokens)
        job = await submit_judge_job(judge_jobs, jobs, tenant, "mcq", data)
        return Response(_run(job), status_code=202, headers={"Location": f"/v1/mata/mcq-runs/{job.id}"})

    @get("/mcq-runs/{run_id:str}", operation_id="getMcqRun", **access("read"), summary="A multiple-choice run")
    async def read_run(self, run_id: str, judge_jobs: JudgeJobStore, tenant: str) -> McqRunOut:
        return _run(await judge_jobs.get(tenant, "mcq", run_id))

    @post(
        "/agreement",
        operation_id="mataAgreement",
        **access("submit"),
        summary="Judge verdicts against human labels: accuracy per source and category, kappa, alpha, harshness",
        status_code=200,
    )
    async def agreement(self, data: MataAgreementRequest) -> MataAgreement:
        return await asyncio.to_thread(mata_agreement, data)
