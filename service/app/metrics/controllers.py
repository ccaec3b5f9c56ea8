"""``/metrics``: the API process's Prometheus metrics, with the job queue's depth read at scrape time.

They count every tenant's traffic (requests per route, judge calls, tokens, the queue), so they are the deployment's:
an admin key of an operator tenant (``TRISK_OPERATOR_TENANTS``) reads them here, any other tenant's admin gets 403
(or they are served on ``TRISK_METRICS_PORT`` without a key, a port kept inside the cluster)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from litestar import Controller, Request, Response, get
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from service.app.auth import access, require_operator
from service.app.health.services import workers_report
from service.app.resources import Resources
from service.platform.telemetry import QUEUE_DEPTH

__all__ = ["MetricsController", "refresh_queue_depth"]

logger = logging.getLogger("trisk.metrics")


async def refresh_queue_depth(resources: Resources) -> None:
    """Read the ARQ queue's length (a sorted set) and the live workers (their heartbeats) into the gauges; a Redis
    outage leaves the last values."""
    if resources.redis is None:
        return
    await workers_report(resources)
    queue = resources.settings.redis.queue_name
    try:
        depth = await asyncio.wait_for(resources.redis.zcard(queue), timeout=1.0)
    except Exception as exc:  # the scrape must still answer
        logger.warning("queue depth not read: %s", type(exc).__name__)
        return
    QUEUE_DEPTH.labels(queue).set(float(depth))


class MetricsController(Controller):
    path = "/metrics"
    tags = ["ops"]
    include_in_schema = True

    @get(
        operation_id="getMetrics",
        **access("admin"),
        summary="Prometheus metrics of this API process (latency per route, queue depth, live workers, rate limits); "
        "an operator tenant's admin only",
        media_type=CONTENT_TYPE_LATEST,
    )
    async def metrics(self, resources: Resources, request: Request[Any, Any, Any]) -> Response[bytes]:
        require_operator(request, resources.settings, "the process metrics count every tenant's traffic")
        await refresh_queue_depth(resources)
        return Response(generate_latest(), media_type=CONTENT_TYPE_LATEST)
