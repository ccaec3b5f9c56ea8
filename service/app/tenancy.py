"""Who owns a request. Until scoped API keys arrive every request runs as the ``default`` tenant."""

from __future__ import annotations

from typing import Any

from litestar import Request

__all__ = ["DEFAULT_TENANT", "current_tenant"]

DEFAULT_TENANT = "default"


def current_tenant(request: Request[Any, Any, Any]) -> str:
    # the single place that decides ownership; API keys will map to a tenant here
    return DEFAULT_TENANT
