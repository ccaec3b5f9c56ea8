"""Who owns a request: the tenant of the API key that authenticated it (``service.app.auth``), decided here only."""

from __future__ import annotations

from typing import Any

from litestar.connection import ASGIConnection

from service.app.auth import principal_of
from service.platform.auth import Principal

__all__ = ["current_principal", "current_tenant"]


def current_principal(connection: ASGIConnection[Any, Any, Any, Any]) -> Principal:
    return principal_of(connection)


def current_tenant(connection: ASGIConnection[Any, Any, Any, Any]) -> str:
    # the single place that decides ownership: every stored object is keyed by this tenant
    return principal_of(connection).tenant
