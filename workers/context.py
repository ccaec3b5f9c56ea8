"""The worker's shared clients as one typed ``WorkerContext``, built once at startup and kept in ARQ's ``ctx``.

ARQ hands every job its ``ctx`` dict (its own keys: ``redis``, the queue's pool, ``job_id``, ``job_try``,
``score``); everything of ours sits under one key, ``ctx["worker"]``, read with ``WorkerContext.of``. A test or a
bench puts fakes in ``ctx`` under the field names before startup (``{"store": ..., "llm": None}``): startup takes
them instead of opening its own (workers/lifecycle.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from service.platform.ratelimit import charged_to

if TYPE_CHECKING:
    import httpx
    from redis.asyncio import Redis

    from service.platform.settings import Settings
    from service.state.risk_catalog import ModelCatalog
    from service.state.store import Store
    from service.state.worker_registry import Heartbeat
    from workers.embedders import Embedders

__all__ = ["KEY", "IndexSource", "WorkerContext", "tries_of"]

KEY = "worker"


class IndexSource(Protocol):
    """The novelty indexes, loaded when first asked for (``workers.lifecycle.Indexes``, or a test's static ones)."""

    async def get(self) -> dict[str, Any]: ...


@dataclass(kw_only=True)
class WorkerContext:
    """What every job of this worker process shares (``ctx["worker"]``)."""

    settings: Settings
    redis_client: Redis  # our own client (the records, the budget); ARQ's pool is ``pool``
    pool: Any  # ARQ's pool (``ctx["redis"]``): jobs queue their follow-on jobs here; None outside ARQ
    catalog: ModelCatalog
    store: Store
    embedders: Embedders
    indexes: IndexSource
    critical: Any  # the critical-error checker (service.core.critical)
    llm: Any  # the LLM client; None: this worker holds no provider
    llm_panel: Any  # the default judge panel (service.core.judges.llm.Panel)
    http: httpx.AsyncClient  # callbacks
    retry_delay: Callable[[int], float]  # seconds before the next try of a failed job (a test may pass 0)
    cheap_job_timeout: float  # ARQ's timeouts of the jobs (a test that shortens them says so)
    llm_job_timeout: float
    length_models: dict[tuple[str, str], Any] = field(default_factory=dict)
    heartbeat: Heartbeat | None = None
    periodic: asyncio.Task[None] | None = None

    def llm_for(self, tenant: str) -> Any:
        """The worker's LLM client charged to ``tenant``'s daily budget (None without a provider): every judge job
        and the LLM tier of assessments spend through it."""
        return charged_to(self.llm, self.redis_client, tenant, self.settings.llm)

    @classmethod
    def of(cls, ctx: dict[str, Any]) -> WorkerContext:
        """The context startup stored in ARQ's ``ctx``."""
        found: WorkerContext = ctx[KEY]
        return found


def tries_of(ctx: dict[str, Any]) -> int:
    """Which delivery of its job this is (ARQ's ``job_try``, 1 = the first)."""
    return int(ctx.get("job_try", 1))
