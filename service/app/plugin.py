"""The plugin that wires trisk into Litestar: routes, problem handlers, lifespan resources, OpenAPI."""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

from litestar import Litestar
from litestar.config.app import AppConfig
from litestar.di import Provide
from litestar.openapi import OpenAPIConfig
from litestar.openapi.spec import Components, SecurityScheme
from litestar.plugins import InitPluginProtocol
from redis.asyncio import Redis
from threadpoolctl import threadpool_limits

from service import __version__
from service.app.assessments.controllers import AssessmentController, ExportController
from service.app.auth import KeyCache
from service.app.batches.controllers import BatchController
from service.app.calibration.controllers import CalibrationController
from service.app.deps import dependencies
from service.app.docs import docs_assets, render_plugins
from service.app.health.controllers import HealthController, WorkerController
from service.app.keys.controllers import CallbackSecretController, KeyController
from service.app.mata.controllers import MataController
from service.app.metrics.controllers import MetricsController, refresh_queue_depth
from service.app.novelty.controllers import NoveltyController
from service.app.personas.controllers import PersonaController
from service.app.poller.controllers import PollerController
from service.app.problems import exception_handlers
from service.app.resources import Resources, open_queue
from service.app.review.controllers import AdjudicationController, ReviewController, VerdictExportController
from service.app.workbench import template_config, with_page_errors, workbench_handlers
from service.core.novelty import load_indexes
from service.core.risk import RiskRegistry
from service.platform.ratelimit import FailureLimiter, RateLimiter
from service.platform.redact import remember
from service.platform.sealing import Sealer
from service.platform.settings import Settings
from service.platform.telemetry import start_metrics_server
from service.state.durable import open_store
from service.state.durable.access import AccessStore
from service.state.risk_catalog import ModelCatalog

__all__ = ["TriskPlugin"]

logger = logging.getLogger("trisk")


async def _refresh_forever(resources: Resources, every_seconds: float = 15.0) -> None:
    """With metrics on their own port there is no handler to read the queue depth at scrape time: poll it."""
    while True:
        await refresh_queue_depth(resources)
        await asyncio.sleep(every_seconds)


class TriskPlugin(InitPluginProtocol):
    """Registers controllers, the error mapping and the resources lifespan on an app config."""

    def __init__(
        self,
        settings: Settings,
        resources: Resources | None = None,
        dependency_overrides: dict[str, Provide] | None = None,
    ) -> None:
        self.settings = settings
        # the credentials of these settings are masked in every log line and problem detail from here on
        remember(settings)
        self.resources = resources
        self.dependency_overrides = dependency_overrides or {}

    def on_app_init(self, app_config: AppConfig) -> AppConfig:
        app_config.route_handlers.extend(
            [
                HealthController,
                WorkerController,
                NoveltyController,
                AssessmentController,
                ExportController,
                BatchController,
                ReviewController,
                VerdictExportController,
                AdjudicationController,
                CalibrationController,
                KeyController,
                CallbackSecretController,
                PersonaController,
                PollerController,
                MataController,
                *workbench_handlers(),
            ]
        )
        app_config.template_config = template_config()
        app_config.route_handlers.append(docs_assets())
        if not self.settings.api.metrics_port:
            app_config.route_handlers.append(MetricsController)
        app_config.dependencies.update({**dependencies(), **self.dependency_overrides})
        app_config.exception_handlers.update(with_page_errors(exception_handlers))
        app_config.lifespan.append(self._lifespan)
        app_config.openapi_config = OpenAPIConfig(
            title="trisk",
            version=__version__,
            description=(
                "Reference-free risk triage for machine translations of classical and low-resource texts: which "
                "candidate translations most need a human look."
            ),
            path="/schema",
            render_plugins=render_plugins(),
            use_handler_docstrings=False,
            components=Components(
                security_schemes={
                    "bearerAuth": SecurityScheme(
                        type="http",
                        scheme="bearer",
                        description="an API key: Authorization: Bearer trisk_<id>_<secret> (trisk keys create)",
                    ),
                    "apiKeyHeader": SecurityScheme(
                        type="apiKey",
                        name="X-API-Key",
                        security_scheme_in="header",
                        description="the same API key in a header of its own",
                    ),
                }
            ),
        )
        return app_config

    @asynccontextmanager
    async def _lifespan(self, app: Litestar) -> AsyncGenerator[None, None]:
        # request handlers do small matrix-vector products: one BLAS thread avoids thread hand-off on a busy box
        threadpool_limits(limits=1, user_api="blas")
        resources = self.resources or Resources(settings=self.settings)
        t0 = time.perf_counter()
        if not resources.indexes:
            resources.indexes, resources.index_errors = load_indexes(
                self.settings.index.path, self.settings.index.signature
            )
        resources.load_seconds = time.perf_counter() - t0
        owns_redis = resources.redis is None
        if owns_redis:
            resources.redis = Redis.from_url(self.settings.redis.url, socket_connect_timeout=2, socket_timeout=5)
        owns_queue = resources.queue is None
        if owns_queue:
            resources.queue = await open_queue(self.settings)
        if resources.db is None:
            # migrates the schema first (idempotent; concurrent starts wait for each other)
            resources.db = await asyncio.to_thread(open_store, self.settings.durable)
        if resources.catalog is None:
            shipped = RiskRegistry.load(self.settings.risk.models_dir)
            resources.catalog = ModelCatalog(shipped, resources.db, self.settings.risk.model)
        if resources.access is None:
            resources.access = AccessStore(resources.db, Sealer.from_setting(self.settings.durable.secret_keys))
        if resources.keys is None:
            resources.keys = KeyCache(resources.access, max_items=self.settings.api.key_cache_size)
        if resources.rate_limiter is None and resources.redis is not None:
            api = self.settings.api
            resources.rate_limiter = RateLimiter(
                resources.redis, per_key=api.rate_per_key, per_tenant=api.rate_per_tenant
            )
        if resources.auth_failures is None and resources.redis is not None:
            resources.auth_failures = FailureLimiter(
                resources.redis, per_window=self.settings.api.auth_failures_per_minute
            )
        app.state.resources = resources
        # what the process loaded so far (modules, the app, indexes, models) lives as long as it does: out of the
        # collector's sight, a full collection no longer walks it. It walked over 200,000 objects (0.5-0.7 s on
        # this 2-core machine under load) and fell inside a request now and then: the tail of POST /v1/assessments
        # (bench/bench_assessments.py)
        gc.freeze()
        refresher = None
        if self.settings.api.metrics_port:
            start_metrics_server(self.settings.api.metrics_port)
            refresher = asyncio.create_task(_refresh_forever(resources))
        try:
            yield
        finally:
            if refresher is not None:
                refresher.cancel()
            if owns_queue and resources.queue is not None:
                await resources.queue.aclose()
            if owns_redis and resources.redis is not None:
                await resources.redis.aclose()
