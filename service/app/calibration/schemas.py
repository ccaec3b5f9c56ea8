"""Request and response types of the calibration endpoints (report, fits, model activation)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from service.core.budget import DEFAULT_BUDGET

__all__ = ["ActivateRequest", "ActivationOut", "DemotionRequest", "FitOut", "FitRequest", "ModelOut"]


class FitRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Search z-scored linear weightings with CV grouped by passage; select by held-out MAJOR recall at ``budget``."""

    source: Literal["human", "panel"] = "human"
    budget: Annotated[float, msgspec.Meta(gt=0.0, le=1.0)] = DEFAULT_BUDGET
    folds: Annotated[int, msgspec.Meta(ge=2, le=10)] = 5
    signals: list[str] | None = None


class FitOut(msgspec.Struct):
    """A fitted model, stored in the durable store (every worker scores with it once it is activated)."""

    model: str
    rule: str
    active: bool
    activate_url: str
    fit: dict[str, Any]
    signals: list[dict[str, Any]]


class ModelOut(msgspec.Struct):
    name: str
    rule: str
    description: str
    tenant: str | None
    active: bool
    cv: dict[str, Any] | None = None
    # a fit's comparison with the model active when it was fitted, on the suttas held apart from it
    validation: dict[str, Any] | None = None


class ActivateRequest(msgspec.Struct, forbid_unknown_fields=True):
    """Activation is compared with the active model on the tenant's verdicts; ``force`` (with a ``reason``, recorded)
    activates a model that loses."""

    force: bool = False
    reason: Annotated[str, msgspec.Meta(max_length=2_000)] | None = None


class DemotionRequest(msgspec.Struct, forbid_unknown_fields=True):
    """The check (a flag rule, e.g. ``critical.list_size``) the active model should no longer force."""

    check: Annotated[str, msgspec.Meta(min_length=1, max_length=200)]


class ActivationOut(msgspec.Struct):
    """One activation: who made it, whether forced over a comparison the model lost (with the reason), what kind of
    model (fit, demotion, shipped) and the comparison with the model it replaced (null: nothing to compare)."""

    tenant: str
    model: str
    rule: str
    activated_at: float
    activated_by: str | None = None
    forced: bool = False
    reason: str | None = None
    kind: str | None = None
    comparison: dict[str, Any] | None = None
