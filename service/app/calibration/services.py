"""Calibration logic behind the controllers: labelled items, the report, fits and per-tenant model activation."""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import msgspec

from service.app.calibration.schemas import (
    ActivateRequest,
    ActivationOut,
    DemotionRequest,
    FitOut,
    FitRequest,
    ModelOut,
)
from service.core.risk import HardFlagRule, RiskModel, RiskRegistry
from service.platform.errors import Conflict, InputError, NotFound
from service.review import get_review_settings
from service.review.calibration import (
    LabelledItem,
    calibration_report,
    fit_risk_model,
    human_items,
    panel_items,
    report_svg,
)
from service.review.calibration.agreement import reviewer_agreement
from service.review.calibration.checks import checks_report
from service.review.calibration.compare import activation_comparison
from service.review.calibration.demotion import demoted_model
from service.review.calibration.fit import validated_fit
from service.state.durable import Activation, DurableStore, FitRecord, Label
from service.state.risk_catalog import ModelCatalog

__all__ = ["activate", "activations", "demote", "fit", "list_models", "report", "svg"]


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


def _active_model(catalog: ModelCatalog, tenant: str) -> RiskModel | None:
    models = catalog.for_tenant(tenant)
    try:
        return models.registry.get(models.active)
    except NotFound:
        return None


def _demotions(catalog: ModelCatalog, tenant: str, active: RiskModel | None) -> list[dict[str, Any]]:
    """The checks reviewers' judgements propose to stop forcing (``checks_report``'s rule, the settings' bar)."""
    if active is None:
        return []
    rs = get_review_settings()
    rep = checks_report(
        catalog.db.verdicts(tenant),
        active.hard_flags,
        min_precision=rs.demote_below_precision,
        min_judged=rs.demote_min_judged,
    )
    return list(rep["demotions"])


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
    if source == "human":
        verdicts = [
            v for v in db.verdicts(tenant) if candidate_model is None or v.snapshot.get("model") == candidate_model
        ]
        rs = get_review_settings()
        active = _active_model(catalog, tenant)
        rep["checks"] = checks_report(
            verdicts,
            active.hard_flags if active is not None else HardFlagRule(),
            min_precision=rs.demote_below_precision,
            min_judged=rs.demote_min_judged,
        )
        rep["checks"]["active_model"] = None if active is None else active.rule
        rep["agreement"] = reviewer_agreement(verdicts)
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
    options: dict[str, Any] = {
        "tenant": tenant,
        "source": data.source,
        "name": "calibrated-probe",
        "budget": data.budget,
        "n_folds": data.folds,
        "signals": data.signals,
        "min_items": rs.min_fit_items,
        "min_majors": rs.min_fit_majors,
        "fallback": fallback,
    }
    # fit once, before naming: too few labels must not leave a stored model behind, and the name changes nothing
    active = _active_model(catalog, tenant)
    if active is None:
        fitted, fit_info = fit_risk_model(items, **options)
    else:
        # from the active model's terms and forcing choices, less the checks reviewers' judgements demote; validated
        # against the active model on suttas held apart from the fit
        demote = [d["check"] for d in _demotions(catalog, tenant, active)]
        registry = catalog.for_tenant(tenant).registry
        fitted, fit_info = validated_fit(items, active=active, registry=registry, demote=demote, **options)
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
        validation = m.fit.get("validation") if isinstance(m.fit, dict) else None
        out.append(
            ModelOut(
                name,
                m.rule,
                m.description,
                tenant if name in models.own else None,
                name == active,
                cv if isinstance(cv, dict) else None,
                validation if isinstance(validation, dict) else None,
            )
        )
    return out


async def list_models(catalog: ModelCatalog, tenant: str) -> list[ModelOut]:
    return await asyncio.to_thread(_list_models, catalog, tenant)


def _activation_out(a: Activation) -> ActivationOut:
    return ActivationOut(
        a.tenant,
        a.model_name,
        a.rule,
        a.activated_at,
        a.activated_by,
        a.forced,
        a.reason,
        a.body.get("kind"),
        a.body.get("comparison"),
    )


def _kind(catalog: ModelCatalog, model: RiskModel) -> str:
    if model.name in catalog.shipped.models:
        return "shipped"
    return "demotion" if isinstance(model.fit, dict) and model.fit.get("kind") == "demotion" else "fit"


def _activate(catalog: ModelCatalog, tenant: str, name: str, data: ActivateRequest, who: str) -> ActivationOut:
    if data.force and not (data.reason or "").strip():
        raise InputError("forcing an activation needs a reason (it is recorded with the activation)")
    model = catalog.visible(tenant, name)
    active = _active_model(catalog, tenant)
    comparison: dict[str, Any] | None = None
    if active is not None and active.rule != model.rule:
        items, _ = human_items(catalog.db, tenant)
        registry = catalog.for_tenant(tenant).registry
        comparison = activation_comparison(items, model, active, registry)
        if comparison["loses"] and not data.force:
            raise Conflict(
                f"{model.rule} loses to the active model {active.rule} on the tenant's verdicts "
                f"({comparison['basis']}); activate with force and a reason to use it anyway",
                extra={"comparison": comparison},
            )
    loses = bool(comparison and comparison["loses"])
    act = catalog.db.activate(
        tenant,
        model.name,
        model.rule,
        activated_by=who,
        forced=loses,
        reason=data.reason,
        body={
            "kind": _kind(catalog, model),
            "replaced": None if active is None else active.rule,
            "comparison": comparison,
        },
    )
    return _activation_out(act)


async def activate(catalog: ModelCatalog, tenant: str, name: str, data: ActivateRequest, who: str) -> ActivationOut:
    """Make ``name`` the tenant's model after comparing it with the active one on the tenant's verdicts: a model that
    loses is refused (409, the comparison in the problem) unless the admin forces it with a reason (recorded)."""
    return await asyncio.to_thread(_activate, catalog, tenant, name, data, who)


async def activations(catalog: ModelCatalog, tenant: str) -> list[ActivationOut]:
    """The tenant's activations, oldest first: the history of the model it scores with (none = the default)."""
    rows = await asyncio.to_thread(catalog.db.activations, tenant)
    return [_activation_out(a) for a in rows]


def _demote(catalog: ModelCatalog, tenant: str, data: DemotionRequest) -> FitOut:
    active = _active_model(catalog, tenant)
    if active is None:
        raise NotFound(f"tenant {tenant!r}'s active risk model is not available")
    proposal = next((d for d in _demotions(catalog, tenant, active) if d["check"] == data.check), None)
    items, _ = human_items(catalog.db, tenant)
    probe = demoted_model(active, data.check, items, name="calibrated-probe", proposal=proposal)
    model = catalog.add_fitted(tenant, lambda name: msgspec.structs.replace(probe, name=name))
    db = catalog.db
    db.add_fit(FitRecord(uuid.uuid4().hex, tenant, model.name, time.time(), {"rule": model.rule, "fit": model.fit}))
    return FitOut(
        model=model.name,
        rule=model.rule,
        active=False,
        activate_url=f"/v1/calibration/models/{model.name}/activate",
        fit=dict(model.fit),
        signals=[msgspec.to_builtins(s) for s in model.signals],
    )


async def demote(catalog: ModelCatalog, tenant: str, data: DemotionRequest) -> FitOut:
    """A model like the active one with ``data.check`` no longer forcing (a score term instead); inactive until the
    admin activates it, like a fit."""
    return await asyncio.to_thread(_demote, catalog, tenant, data)
