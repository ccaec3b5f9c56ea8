"""``create_app``: the one app factory (settings from the environment unless given), and the OpenAPI document of
the app it builds (``openapi_document``)."""

from __future__ import annotations

import json

import msgspec
from litestar import Litestar
from litestar.config.cors import CORSConfig
from litestar.di import Provide

from service.app.middleware import RequestContextMiddleware, add_response_headers, refuse_nul
from service.app.openapi import StrictStructSchemaPlugin
from service.app.plugin import TriskPlugin
from service.app.resources import Resources
from service.platform.settings import Settings, get_settings

__all__ = ["create_app", "openapi_document"]


def create_app(
    settings: Settings | None = None,
    resources: Resources | None = None,
    dependency_overrides: dict[str, Provide] | None = None,
) -> Litestar:
    """Build the app; tests pass prepared ``resources`` (for example an index built from a corpus slice) and
    replace dependencies by name (``service.app.deps``), e.g. the caller's tenant."""
    settings = settings or get_settings()
    origins = [o.strip() for o in settings.api.cors_allow_origins.split(",") if o.strip()]
    # the body limit must be given here: Litestar reads it from the constructor argument, not the plugin's config
    return Litestar(
        plugins=[TriskPlugin(settings, resources, dependency_overrides), StrictStructSchemaPlugin()],
        # ids, metrics and headers on every answer; the key and its scope are each route's guard (service.app.auth)
        middleware=[RequestContextMiddleware],
        before_send=[add_response_headers],
        before_request=refuse_nul,
        # CORS is off unless origins are listed: a browser page elsewhere must not drive a reviewer's key
        cors_config=CORSConfig(
            allow_origins=origins,
            allow_methods=["GET", "POST", "PUT", "DELETE"],
            allow_headers=["Authorization", "X-API-Key", "Content-Type", "Idempotency-Key", "X-Request-ID"],
            expose_headers=["Location", "Retry-After", "RateLimit", "RateLimit-Policy", "X-Request-ID"],
        )
        if origins
        else None,
        request_max_body_size=settings.limits.max_body_bytes,
        # no logging set-up of Litestar's own (its text handler on the `litestar` logger): its lines go through the
        # process's one handler (service.platform.telemetry.configure_logging), as JSON with the request id and tenant
        logging_config=None,
    )


def openapi_document() -> str:
    app = create_app(resources=Resources(settings=get_settings()))
    # through msgspec first: defaults of struct-typed fields are structs, which the json module cannot encode
    plain = json.loads(msgspec.json.encode(app.openapi_schema.to_schema()))
    return json.dumps(plain, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
