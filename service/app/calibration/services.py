"""Calibration logic behind the controllers: labelled items, the report, fits and per-tenant model activation."""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import msgspec

from service.app.calibration.schemas import ActivationOut, FitOut, FitRequest, ModelOut
from service.app.resources import Resources
from service.core.calibration import (
    LabelledItem,
    active_model_name,
    calibration_report,
    fit_risk_model,
    human_items,
    panel_items,
    report_svg,
    write_model,
)
from service.core.errors import InputError, NotFound
from service.core.review import FitRecord, get_review_settings, open_db
from service.core.review.db import Label, ReviewDB
from service.core.risk import RiskModel, RiskRegistry

__all__ = ["activate", "fit", "list_models", "report", "svg"]


def _db() -> ReviewDB:
    return open_db(get_review_settings().db_path)


def _registry(resources: Resources) -> RiskRegistry:
    return RiskRegistry.load(resources.settings.risk.models_dir)


def _owner(model: RiskModel) -> str | None:
    owner = model.fit.get("tenant") if isinstance(model.fit, dict) else None
    return owner if isinstance(owner, str) else None


def _visible(model: RiskModel, tenant: str) -> bool:
    owner = _owner(model)
    return owner is None or owner == tenant


def _items(db: ReviewDB, tenant: str, source: str, candidate_model: str | None) -> tuple[list[LabelledItem], int]:
    if source == "human":
        return human_items(db, tenant, candidate_model)
    items, n, _ = panel_items(db, tenant, candidate_model)
    return items, n


def _model_for(resources: Resources, db: ReviewDB, tenant: str, name: str | None) -> tuple[RiskModel | None, str]:
    registry = _registry(resources)
    if name is not None:
        model = registry.get(name)
        if not _visible(model, tenant):
            raise NotFound(f"no risk model {name!r}")
        return model, ""
    default = active_model_name(db, tenant, resources.settings.risk.model)
    try:
        return registry.get(default), ""
    except NotFound:
        return None, f"the active risk model {default!r} is not in models/risk; only stored risk and signals"


def _build_report(
    resources: Resources,
    tenant: str,
    source: str,
    model_name: str | None,
    candidate_model: str | None,
    overlap_budget: float,
) -> dict[str, Any]:
    db = _db()
    items, n_labels = _items(db, tenant, source, candidate_model)
    model, note = _model_for(resources, db, tenant, model_name)
    other_items, _ = _items(db, tenant, "panel" if source == "human" else "human", candidate_model)
    other: dict[str, Label] = {it.item_id: it.label for it in other_items}
    rep = calibration_report(
        items,
        tenant=tenant,
        source=source,
        n_labels=n_labels,
        model=model,
        registry=_registry(resources),
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
    resources: Resources,
    tenant: str,
    source: str,
    model_name: str | None,
    candidate_model: str | None,
    overlap_budget: float,
) -> dict[str, Any]:
    if not 0.0 < overlap_budget <= 1.0:
        raise InputError(f"overlap_budget must be in (0, 1], got {overlap_budget}")
    return await asyncio.to_thread(
        _build_report, resources, tenant, source, model_name, candidate_model, overlap_budget
    )


def _build_svg(
    resources: Resources, tenant: str, source: str, model_name: str | None, candidate_model: str | None
) -> str:
    db = _db()
    items, n_labels = _items(db, tenant, source, candidate_model)
    model, _ = _model_for(resources, db, tenant, model_name)
    majors = sum(1 for it in items if it.label == "MAJOR")
    title = f"{source} labels: {len(items)} items ({n_labels} labels), {majors} MAJOR; tenant {tenant}"
    return report_svg(items, model, _registry(resources), title=title)


async def svg(
    resources: Resources, tenant: str, source: str, model_name: str | None, candidate_model: str | None
) -> str:
    return await asyncio.to_thread(_build_svg, resources, tenant, source, model_name, candidate_model)


def _fit(resources: Resources, tenant: str, data: FitRequest) -> FitOut:
    db = _db()
    rs = get_review_settings()
    items, _ = _items(db, tenant, data.source, None)
    registry = _registry(resources)
    fallback = "single-candidate-v1" if "single-candidate-v1" in registry.models else None
    result: dict[str, Any] = {}

    def build(name: str) -> RiskModel:
        model, fit_info = fit_risk_model(
            items,
            tenant=tenant,
            source=data.source,
            name=name,
            budget=data.budget,
            n_folds=data.folds,
            signals=data.signals,
            min_items=rs.min_fit_items,
            min_majors=rs.min_fit_majors,
            fallback=fallback,
        )
        result["fit"] = fit_info
        return model

    # fit once before naming (too few labels must not leave a file behind), then write under the next free name
    build("calibrated-probe")
    model, path = write_model(build, resources.settings.risk.models_dir, tenant)
    db.add_fit(
        FitRecord(
            uuid.uuid4().hex,
            tenant,
            model.name,
            time.time(),
            {"rule": model.rule, "path": str(path), "fit": result["fit"]},
        )
    )
    return FitOut(
        model=model.name,
        rule=model.rule,
        path=str(Path(path).relative_to(Path(resources.settings.risk.models_dir).parent))
        if Path(path).is_relative_to(Path(resources.settings.risk.models_dir).parent)
        else str(path),
        active=False,
        activate_url=f"/v1/calibration/models/{model.name}/activate",
        fit=result["fit"],
        signals=[msgspec.to_builtins(s) for s in model.signals],
    )


async def fit(resources: Resources, tenant: str, data: FitRequest) -> FitOut:
    return await asyncio.to_thread(_fit, resources, tenant, data)


def _list_models(resources: Resources, tenant: str) -> list[ModelOut]:
    registry = _registry(resources)
    active = active_model_name(_db(), tenant, resources.settings.risk.model)
    active = registry.aliases.get(active, active)
    out = []
    for name, m in sorted(registry.models.items()):
        if not _visible(m, tenant):
            continue
        cv = m.fit.get("cv") if isinstance(m.fit, dict) else None
        out.append(
            ModelOut(name, m.rule, m.description, _owner(m), name == active, cv if isinstance(cv, dict) else None)
        )
    return out


async def list_models(resources: Resources, tenant: str) -> list[ModelOut]:
    return await asyncio.to_thread(_list_models, resources, tenant)


def _activate(resources: Resources, tenant: str, name: str) -> ActivationOut:
    model = _registry(resources).get(name)
    if not _visible(model, tenant):
        raise NotFound(f"no risk model {name!r}")
    act = _db().activate(tenant, model.name, model.rule)
    return ActivationOut(act.tenant, act.model_name, act.rule, act.activated_at)


async def activate(resources: Resources, tenant: str, name: str) -> ActivationOut:
    return await asyncio.to_thread(_activate, resources, tenant, name)
