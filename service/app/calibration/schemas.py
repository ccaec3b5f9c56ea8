"""Request and response types of the calibration endpoints (report, fits, model activation)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

from service.core.budget import DEFAULT_BUDGET

__all__ = ["ActivationOut", "FitOut", "FitRequest", "ModelOut"]


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


class ActivationOut(msgspec.Struct):
    tenant: str
    model: str
    rule: str
    activated_at: float
