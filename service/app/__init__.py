"""The Litestar web app: ``create_app`` is the one factory."""

from __future__ import annotations

from service.app.factory import create_app

__all__ = ["create_app"]
