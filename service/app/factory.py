"""``create_app``: the one app factory (settings from the environment unless given)."""

from __future__ import annotations

import logging

from litestar import Litestar
from litestar.di import Provide

from service.app.plugin import TriskPlugin
from service.app.resources import Resources
from service.core.settings import Settings, get_settings

__all__ = ["create_app"]


def create_app(
    settings: Settings | None = None,
    resources: Resources | None = None,
    dependency_overrides: dict[str, Provide] | None = None,
) -> Litestar:
    """Build the app; tests pass prepared ``resources`` (for example an index built from a corpus slice) and
    replace dependencies by name (``service.app.deps``), e.g. the caller's tenant."""
    settings = settings or get_settings()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    # the body limit must be given here: Litestar reads it from the constructor argument, not the plugin's config
    return Litestar(
        plugins=[TriskPlugin(settings, resources, dependency_overrides)],
        request_max_body_size=settings.limits.max_body_bytes,
    )
