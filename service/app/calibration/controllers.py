"""``/v1/calibration``: detection report against verdicts or panel labels (JSON and SVG), fits, model activation."""

from __future__ import annotations

from typing import Any, Literal

from litestar import Controller, Response, get, post
from litestar.params import Parameter

from service.app.auth import access
from service.app.calibration import services
from service.app.calibration.schemas import ActivationOut, FitOut, FitRequest, ModelOut
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
            "reason when a class is absent; label counts say what the report rests on."
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
        status_code=200,
    )
    async def activate(self, name: str, catalog: ModelCatalog, tenant: str) -> ActivationOut:
        return await services.activate(catalog, tenant, name)
