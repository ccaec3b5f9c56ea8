"""Run the real ARQ worker in-process, in burst mode, against the test Redis (used by API and worker tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from arq.connections import RedisSettings
from arq.worker import Worker

from service.core.settings import Settings
from workers.jobs import shutdown, startup
from workers.settings import WorkerSettings


class StaticIndexes:
    """Novelty indexes already in memory (the tests' corpus slice), in place of the worker's lazy loader."""

    def __init__(self, indexes: dict[str, Any]) -> None:
        self.indexes = indexes

    async def get(self) -> dict[str, Any]:
        return self.indexes


def run_worker_burst(
    settings: Settings, *, max_jobs: int = 4, ctx: dict[str, Any] | None = None, max_burst_jobs: int = -1
) -> Any:
    """Process every queued job (deferred retries included), or ``max_burst_jobs`` of them, then return the worker
    (its counters say how many jobs ran, failed and were retried). ``ctx`` overrides the worker's shared clients
    (fakes, counters): startup keeps whatever is already there."""

    async def main() -> Worker:
        worker = Worker(
            functions=WorkerSettings.functions,
            redis_settings=RedisSettings.from_dsn(settings.redis.url),
            queue_name=settings.redis.queue_name,
            on_startup=startup,
            on_shutdown=shutdown,
            burst=True,
            max_burst_jobs=max_burst_jobs,
            poll_delay=0.05,
            max_jobs=max_jobs,
            queue_read_limit=WorkerSettings.queue_read_limit,
            on_job_start=WorkerSettings.on_job_start,
            after_job_end=WorkerSettings.after_job_end,
            handle_signals=False,
            # the test process must not lower its own priority as a real worker does
            ctx={"settings": settings, "nice": False, **(ctx or {})},
        )
        try:
            await worker.main()
        finally:
            await worker.close()
        return worker

    return asyncio.run(main())
