"""The OpenAPI document as committed to ``openapi/openapi.json`` (stable key order, trailing newline)."""

from __future__ import annotations

import json

from service.app.factory import create_app
from service.app.resources import Resources
from service.core.settings import get_settings

__all__ = ["openapi_document"]


def openapi_document() -> str:
    app = create_app(resources=Resources(settings=get_settings()))
    return json.dumps(app.openapi_schema.to_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
