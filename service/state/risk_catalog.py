"""The risk models a tenant can use and the one it scores with: shipped models (files under ``models/risk``) plus the
tenant's fitted models and activations from the durable store, one interface for the API and every worker.

A fitted model is stored in the durable store, never as a file on the host that fitted it, so a worker on another
machine scores with exactly the model that was activated. Its name (``calibrated-<tenant>-v<N>``) cannot shadow a
shipped model. Methods do database I/O: call them from a thread when on an event loop.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from service.core.risk import RiskModel, RiskRegistry
from service.platform.errors import InputError, NotFound
from service.state.durable import Activation, DurableStore

__all__ = ["ModelCatalog", "TenantModels", "fitted_name"]

_SLUG = re.compile(r"[^a-z0-9]+")
_model_dec = msgspec.json.Decoder(RiskModel)
_enc = msgspec.json.Encoder()


def fitted_name(tenant: str, n: int) -> str:
    """The name of a tenant's n-th fitted model."""
    slug = _SLUG.sub("-", tenant.lower()).strip("-") or "tenant"
    return f"calibrated-{slug}-v{n}"


@dataclass(frozen=True)
class TenantModels:
    """What one tenant sees: every usable model (shipped and its own) and the name of its active one."""

    registry: RiskRegistry
    own: frozenset[str]  # names of the tenant's fitted models
    active: str  # the name (or alias) new assessments are scored with


class ModelCatalog:
    """Shipped models plus per-tenant fitted models; fitted models are cached per tenant until one is added."""

    def __init__(self, shipped: RiskRegistry, db: DurableStore, default_model: str) -> None:
        self.shipped = shipped
        self.db = db
        self.default_model = default_model
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[int, dict[str, RiskModel]]] = {}

    def _fitted(self, tenant: str) -> dict[str, RiskModel]:
        version = self.db.models_version(tenant)
        with self._lock:
            hit = self._cache.get(tenant)
            if hit is not None and hit[0] == version:
                return hit[1]
        models = {name: _model_dec.decode(body) for name, body in self.db.models(tenant)}
        with self._lock:
            self._cache[tenant] = (version, models)
        return models

    def for_tenant(self, tenant: str) -> TenantModels:
        fitted = self._fitted(tenant)
        registry = RiskRegistry({**self.shipped.models, **fitted}, self.shipped.aliases)
        act = self.db.active(tenant)
        return TenantModels(
            registry=registry, own=frozenset(fitted), active=act.model_name if act else self.default_model
        )

    def visible(self, tenant: str, name: str) -> RiskModel:
        """A model this tenant may use (shipped or its own); another tenant's model is NotFound, like no model."""
        return self.for_tenant(tenant).registry.get(name)

    def add_fitted(self, tenant: str, model_for: Callable[[str], RiskModel]) -> RiskModel:
        """Store a fitted model under the tenant's next free name; ``model_for(name)`` builds it."""
        built: dict[str, RiskModel] = {}

        def name_for(n: int) -> tuple[str, str, str]:
            name = fitted_name(tenant, n)
            if name in self.shipped.models or name in self.shipped.aliases:
                raise InputError(f"fitted model name {name!r} would shadow a shipped model")
            built[name] = model = model_for(name)
            return name, model.rule, _enc.encode(model).decode()

        name, _ = self.db.add_model(tenant, name_for)
        return built[name]

    def activate(self, tenant: str, name: str) -> Activation:
        model = self.visible(tenant, name)
        return self.db.activate(tenant, model.name, model.rule)

    def active_model(self, tenant: str) -> tuple[RiskRegistry, str]:
        """The registry to score a tenant's assessment with and the name of its active model."""
        models = self.for_tenant(tenant)
        try:
            models.registry.get(models.active)
        except NotFound as exc:
            raise NotFound(f"tenant {tenant!r}'s active risk model {models.active!r} is not available") from exc
        return models.registry, models.active
