"""Run the real ARQ worker in-process, in burst mode, against the test Redis (used by API tests)."""

from __future__ import annotations

import asyncio
from typing import Any

from arq.connections import RedisSettings
from arq.worker import Worker

from service.core.settings import Settings
from workers.jobs import shutdown, startup
from workers.settings import WorkerSettings


def run_worker_burst(settings: Settings, *, max_jobs: int = 4) -> Any:
    """Process every queued job, then return the worker (its counters say how many jobs ran and failed)."""

    async def main() -> Worker:
        worker = Worker(
            functions=WorkerSettings.functions,
            redis_settings=RedisSettings.from_dsn(settings.redis.url),
            queue_name=settings.redis.queue_name,
            on_startup=startup,
            on_shutdown=shutdown,
            burst=True,
            poll_delay=0.05,
            max_jobs=max_jobs,
            handle_signals=False,
            ctx={"settings": settings},
        )
        try:
            await worker.main()
        finally:
            await worker.close()
        return worker

    return asyncio.run(main())
