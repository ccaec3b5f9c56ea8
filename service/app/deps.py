"""Dependencies of the request handlers (Litestar ``Provide``): store, job queue, review queue, judge jobs, durable
store, model catalog and the caller's tenant. Tests override these, never the modules that use them."""

from __future__ import annotations

from typing import Any

from litestar import Request
from litestar.datastructures import State
from litestar.di import Provide

from service.app.resources import Resources, open_queue
from service.app.tenancy import current_tenant
from service.companions.judge_jobs import JudgeJobStore
from service.platform.errors import NotReady, RedisUnavailable
from service.platform.settings import Settings
from service.review.queue import ReviewQueue
from service.state import lanes
from service.state.durable import DurableStore
from service.state.durable.records_store import Quotas
from service.state.risk_catalog import ModelCatalog
from service.state.store import Store

__all__ = ["JobQueue", "dependencies"]


class JobQueue:
    """Enqueues ARQ jobs; connects on first use when Redis was not up at start (503 until it is)."""

    def __init__(self, resources: Resources) -> None:
        self.resources = resources

    async def _pool(self) -> Any:
        if self.resources.queue is None:
            self.resources.queue = await open_queue(self.resources.settings)
        if self.resources.queue is None:
            raise RedisUnavailable("the job queue is not connected: Redis does not answer; retry shortly")
        return self.resources.queue

    async def enqueue(
        self, function: str, tenant: str, *args: Any, job_id: str, lane: lanes.Lane = "interactive", cost: int = 1
    ) -> None:
        """Queue ``function(tenant, *args)`` in its lane at the tenant's fair share (``service.state.lanes``)."""
        # a fixed job id makes enqueueing idempotent: a replayed request never queues the same work twice
        await lanes.enqueue(await self._pool(), function, tenant, *args, job_id=job_id, lane=lane, cost=cost)

    async def enqueue_many(
        self, function: str, tenant: str, jobs: list[tuple[tuple[Any, ...], str, int]], *, lane: lanes.Lane
    ) -> None:
        """Many jobs of one tenant, ``(args, job_id, cost)`` each, their fair shares reserved in one step."""
        await lanes.enqueue_many(await self._pool(), function, tenant, jobs, lane=lane)


def provide_resources(state: State) -> Resources:
    resources: Resources = state.resources
    return resources


def provide_settings(resources: Resources) -> Settings:
    return resources.settings


def provide_store(resources: Resources) -> Store:
    if resources.redis is None:
        raise NotReady("Redis is not connected")
    if resources.db is None:
        raise NotReady("the durable store is not open")
    limits = resources.settings.limits
    quotas = Quotas(limits.max_stored_assessments, limits.max_queued_candidates)
    return Store(
        resources.redis, retention_seconds=resources.settings.redis.retention_seconds, db=resources.db, quotas=quotas
    )


def provide_jobs(resources: Resources) -> JobQueue:
    return JobQueue(resources)


def provide_review_queue(resources: Resources) -> ReviewQueue:
    return ReviewQueue(provide_db(resources))


def provide_judge_jobs(resources: Resources) -> JudgeJobStore:
    if resources.redis is None:
        raise NotReady("Redis is not connected")
    if resources.db is None:
        raise NotReady("the durable store is not open")
    return JudgeJobStore(resources.redis, retention_seconds=resources.settings.redis.retention_seconds, db=resources.db)


def provide_db(resources: Resources) -> DurableStore:
    if resources.db is None:
        raise NotReady("the durable store is not open")
    return resources.db


def provide_catalog(resources: Resources) -> ModelCatalog:
    if resources.catalog is None:
        raise NotReady("the risk-model catalog is not loaded")
    return resources.catalog


def provide_tenant(request: Request[Any, Any, Any]) -> str:
    return current_tenant(request)


def dependencies() -> dict[str, Provide]:
    """The app-wide dependencies by parameter name (``create_app(dependency_overrides=...)`` replaces any)."""
    return {
        "resources": Provide(provide_resources, sync_to_thread=False),
        "settings": Provide(provide_settings, sync_to_thread=False),
        "store": Provide(provide_store, sync_to_thread=False),
        "jobs": Provide(provide_jobs, sync_to_thread=False),
        "review_queue": Provide(provide_review_queue, sync_to_thread=False),
        "judge_jobs": Provide(provide_judge_jobs, sync_to_thread=False),
        "db": Provide(provide_db, sync_to_thread=False),
        "catalog": Provide(provide_catalog, sync_to_thread=False),
        "tenant": Provide(provide_tenant, sync_to_thread=False),
    }
