"""``/v1/calibration``: detection report against verdicts or panel labels (JSON and SVG), fits, model activation."""

from __future__ import annotations

from typing import Any, Literal

from litestar import Controller, Request, Response, get, post
from litestar.params import Parameter

from service.app.auth import access, principal_of, reviewer_of
from service.app.calibration import services
from service.app.calibration.schemas import (
    ActivateRequest,
    ActivationOut,
    DemotionRequest,
    FitOut,
    FitRequest,
    ModelOut,
)
from service.core.budget import DEFAULT_BUDGET
from service.state.risk_catalog import ModelCatalog

__all__ = ["CalibrationController"]

Source = Literal["human", "panel"]


class CalibrationController(Controller):
    path = "/v1/calibration"
    tags = ("calibration",)

    @get(
        "/report",
        operation_id="getCalibrationReport",
        **access("read"),
        summary="AUC, recall/precision at budgets (Wilson), overlap and judge agreement against labels",
        description=(
            "source=human (reviewer verdicts, majority per item) or panel (adjudication labels), never mixed. "
            "model names the risk model re-applied to stored signals (default: the tenant's active model); "
            "candidate_model restricts to one translating system. Figures needing both classes are refused with the "
            "reason when a class is absent; label counts say what the report rests on. With source=human also "
            "checks (each check's precision and forcing precision from reviewers' judgements of its findings, with "
            "Wilson intervals, per risk model too; reviewer-side recall per error category; demotions proposed "
            "against the active model) and agreement (Cohen's kappa per reviewer pair, Krippendorff's alpha, "
            "bootstrap intervals)."
        ),
    )
    async def report(
        self,
        catalog: ModelCatalog,
        tenant: str,
        source: Source = "human",
        model: str | None = None,
        candidate_model: str | None = None,
        overlap_budget: float = Parameter(default=DEFAULT_BUDGET, gt=0.0, le=1.0),
    ) -> dict[str, Any]:
        return await services.report(catalog, tenant, source, model, candidate_model, overlap_budget)

    @get(
        "/report.svg",
        operation_id="getCalibrationReportSvg",
        **access("read"),
        summary="Budget-recall curves for MAJOR as SVG",
        media_type="image/svg+xml",
    )
    async def report_svg(
        self,
        catalog: ModelCatalog,
        tenant: str,
        source: Source = "human",
        model: str | None = None,
        candidate_model: str | None = None,
    ) -> Response[str]:
        body = await services.svg(catalog, tenant, source, model, candidate_model)
        return Response(body, media_type="image/svg+xml")

    @post(
        "/fits",
        operation_id="createRiskFit",
        **access("admin"),
        summary="Fit a new risk model from labels (grouped CV); inactive until activated",
        status_code=201,
    )
    async def fit(self, data: FitRequest, catalog: ModelCatalog, tenant: str) -> FitOut:
        return await services.fit(catalog, tenant, data)

    @get(
        "/models",
        operation_id="listRiskModels",
        **access("read"),
        summary="Risk models this tenant can use, with the active one",
    )
    async def models(self, catalog: ModelCatalog, tenant: str) -> list[ModelOut]:
        return await services.list_models(catalog, tenant)

    @get(
        "/activations",
        operation_id="listRiskModelActivations",
        **access("read"),
        summary="Every activation of a risk model for this tenant, oldest first (the last is the active one)",
    )
    async def activations(self, catalog: ModelCatalog, tenant: str) -> list[ActivationOut]:
        return await services.activations(catalog, tenant)

    @post(
        "/models/{name:str}/activate",
        operation_id="activateRiskModel",
        **access("admin"),
        summary="Make a risk model the tenant's active one (new assessments are scored with it)",
        description=(
            "The model is first compared with the active one on the tenant's verdicts (a fit: on the suttas held "
            "apart from it; otherwise every labelled item): recall of MAJOR in the top 1/5/10/20%, overall and per "
            "error category, with Wilson intervals. A model that loses (recall below the lower end of the active "
            "model's interval) is refused with 409 and the comparison, unless the body says force with a reason; "
            "the activation history records who, the comparison, and whether and why it was forced."
        ),
        status_code=200,
    )
    async def activate(
        self,
        request: Request[Any, Any, Any],
        name: str,
        catalog: ModelCatalog,
        tenant: str,
        data: ActivateRequest | None = None,
    ) -> ActivationOut:
        who = reviewer_of(principal_of(request))
        return await services.activate(catalog, tenant, name, data or ActivateRequest(), who)

    @post(
        "/demotions",
        operation_id="createCheckDemotion",
        **access("admin"),
        summary="A model like the active one with a check no longer forcing (its signal a score term); inactive until "
        "activated",
        description=(
            "The calibration report's checks.demotions lists the checks reviewers' judgements propose (forcing "
            "precision below TRISK_DEMOTE_BELOW_PRECISION on at least TRISK_DEMOTE_MIN_JUDGED judged findings); "
            "any check the active model forces can be demoted. 422 when the active model does not force it."
        ),
        status_code=201,
    )
    async def demote(self, data: DemotionRequest, catalog: ModelCatalog, tenant: str) -> FitOut:
        return await services.demote(catalog, tenant, data)
