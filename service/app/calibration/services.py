"""Calibration logic behind the controllers: labelled items, the report, fits and per-tenant model activation."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import msgspec

from service.app.calibration.schemas import ActivationOut, FitOut, FitRequest, ModelOut
from service.core.risk import RiskModel, RiskRegistry
from service.platform.errors import InputError, NotFound
from service.review import get_review_settings
from service.review.calibration import (
    LabelledItem,
    calibration_report,
    fit_risk_model,
    human_items,
    panel_items,
    report_svg,
)
from service.state.durable import DurableStore, FitRecord, Label
from service.state.risk_catalog import ModelCatalog

__all__ = ["activate", "activations", "fit", "list_models", "report", "svg"]


def _items(db: DurableStore, tenant: str, source: str, candidate_model: str | None) -> tuple[list[LabelledItem], int]:
    if source == "human":
        return human_items(db, tenant, candidate_model)
    items, n, _ = panel_items(db, tenant, candidate_model)
    return items, n


def _model_for(catalog: ModelCatalog, tenant: str, name: str | None) -> tuple[RiskModel | None, RiskRegistry, str]:
    """The model the report re-applies (named, else the tenant's active one), the registry and a note."""
    models = catalog.for_tenant(tenant)
    wanted = name if name is not None else models.active
    try:
        return models.registry.get(wanted), models.registry, ""
    except NotFound:
        if name is not None:
            raise
        return None, models.registry, f"the active risk model {wanted!r} is not available; only stored risk and signals"


def _build_report(
    catalog: ModelCatalog,
    tenant: str,
    source: str,
    model_name: str | None,
    candidate_model: str | None,
    overlap_budget: float,
) -> dict[str, Any]:
    db = catalog.db
    items, n_labels = _items(db, tenant, source, candidate_model)
    model, registry, note = _model_for(catalog, tenant, model_name)
    other_items, _ = _items(db, tenant, "panel" if source == "human" else "human", candidate_model)
    other: dict[str, Label] = {it.item_id: it.label for it in other_items}
    rep = calibration_report(
        items,
        tenant=tenant,
        source=source,
        n_labels=n_labels,
        model=model,
        registry=registry,
        overlap_budget=overlap_budget,
        judge_error_max_score=get_review_settings().judge_error_max_score,
        other_labels=other,
    )
    if note:
        rep["notes"].append(note)
    if candidate_model is not None:
        rep["candidate_model"] = candidate_model
    return rep


async def report(
    catalog: ModelCatalog,
    tenant: str,
    source: str,
    model_name: str | None,
    candidate_model: str | None,
    overlap_budget: float,
) -> dict[str, Any]:
    if not 0.0 < overlap_budget <= 1.0:
        raise InputError(f"overlap_budget must be in (0, 1], got {overlap_budget}")
    return await asyncio.to_thread(_build_report, catalog, tenant, source, model_name, candidate_model, overlap_budget)


def _build_svg(
    catalog: ModelCatalog, tenant: str, source: str, model_name: str | None, candidate_model: str | None
) -> str:
    items, n_labels = _items(catalog.db, tenant, source, candidate_model)
    model, registry, _ = _model_for(catalog, tenant, model_name)
    majors = sum(1 for it in items if it.label == "MAJOR")
    title = f"{source} labels: {len(items)} items ({n_labels} labels), {majors} MAJOR; tenant {tenant}"
    return report_svg(items, model, registry, title=title)


async def svg(
    catalog: ModelCatalog, tenant: str, source: str, model_name: str | None, candidate_model: str | None
) -> str:
    return await asyncio.to_thread(_build_svg, catalog, tenant, source, model_name, candidate_model)


def _fit(catalog: ModelCatalog, tenant: str, data: FitRequest) -> FitOut:
    db = catalog.db
    rs = get_review_settings()
    items, _ = _items(db, tenant, data.source, None)
    fallback = "single-candidate-v1" if "single-candidate-v1" in catalog.shipped.models else None
    # fit once, before naming: too few labels must not leave a stored model behind, and the name changes nothing
    fitted, fit_info = fit_risk_model(
        items,
        tenant=tenant,
        source=data.source,
        name="calibrated-probe",
        budget=data.budget,
        n_folds=data.folds,
        signals=data.signals,
        min_items=rs.min_fit_items,
        min_majors=rs.min_fit_majors,
        fallback=fallback,
    )
    model = catalog.add_fitted(tenant, lambda name: msgspec.structs.replace(fitted, name=name))
    db.add_fit(FitRecord(uuid.uuid4().hex, tenant, model.name, time.time(), {"rule": model.rule, "fit": fit_info}))
    return FitOut(
        model=model.name,
        rule=model.rule,
        active=False,
        activate_url=f"/v1/calibration/models/{model.name}/activate",
        fit=fit_info,
        signals=[msgspec.to_builtins(s) for s in model.signals],
    )


async def fit(catalog: ModelCatalog, tenant: str, data: FitRequest) -> FitOut:
    return await asyncio.to_thread(_fit, catalog, tenant, data)


def _list_models(catalog: ModelCatalog, tenant: str) -> list[ModelOut]:
    models = catalog.for_tenant(tenant)
    active = models.registry.aliases.get(models.active, models.active)
    out = []
    for name, m in sorted(models.registry.models.items()):
        cv = m.fit.get("cv") if isinstance(m.fit, dict) else None
        out.append(
            ModelOut(
                name,
                m.rule,
                m.description,
                tenant if name in models.own else None,
                name == active,
                cv if isinstance(cv, dict) else None,
            )
        )
    return out


async def list_models(catalog: ModelCatalog, tenant: str) -> list[ModelOut]:
    return await asyncio.to_thread(_list_models, catalog, tenant)


async def activate(catalog: ModelCatalog, tenant: str, name: str) -> ActivationOut:
    act = await asyncio.to_thread(catalog.activate, tenant, name)
    return ActivationOut(act.tenant, act.model_name, act.rule, act.activated_at)


async def activations(catalog: ModelCatalog, tenant: str) -> list[ActivationOut]:
    """The tenant's activations, oldest first: the history of the model it scores with (none = the default)."""
    rows = await asyncio.to_thread(catalog.db.activations, tenant)
    return [ActivationOut(a.tenant, a.model_name, a.rule, a.activated_at) for a in rows]
