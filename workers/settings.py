"""``WorkerSettings`` for ``arq workers.settings.WorkerSettings``: jobs, timeouts, retries, health key."""

from __future__ import annotations

import socket
from typing import Any

from arq.connections import RedisSettings
from arq.worker import func

from service.core import lanes
from service.core.settings import get_settings
from service.core.telemetry import configure_logging, start_metrics_server
from workers.jobs import (
    MAX_TRIES,
    adjudicate,
    assess_cheap,
    assess_llm,
    deliver_callback,
    judge,
    shutdown,
    startup,
)

__all__ = ["WorkerSettings"]

_settings = get_settings()
CHEAP_TIMEOUT = 120


async def on_worker_start(ctx: dict[str, Any]) -> None:
    """The worker process as the ``arq`` command runs it: structured logs, its metrics port, then the jobs' clients."""
    configure_logging(_settings.api.log_format)
    if _settings.api.worker_metrics_port:
        start_metrics_server(_settings.api.worker_metrics_port)
    await startup(ctx)


class WorkerSettings:
    """A plain arq settings class; every job is idempotent (keyed by assessment and part). Assessment jobs get one
    delivery beyond their own ``MAX_TRIES`` so a worker lost on the last try still leaves a final state."""

    functions = [  # arq reads these class attributes
        func(assess_cheap, name="assess_cheap", timeout=CHEAP_TIMEOUT, max_tries=MAX_TRIES + 1),
        func(assess_llm, name="assess_llm", timeout=900, max_tries=MAX_TRIES + 1),
        func(
            deliver_callback, name="deliver_callback", timeout=30, max_tries=max(1, _settings.jobs.callback_max_tries)
        ),
        func(adjudicate, name="adjudicate", timeout=600, max_tries=MAX_TRIES),
        func(judge, name="judge", timeout=900, max_tries=MAX_TRIES + 1),
    ]
    on_startup = on_worker_start
    on_shutdown = shutdown
    redis_settings = RedisSettings.from_dsn(_settings.redis.url)
    queue_name = _settings.redis.queue_name
    # one key per host (a pod runs one worker): a live worker elsewhere must not keep this one's liveness green
    health_check_key = f"{_settings.redis.queue_name}:health-check:{socket.gethostname()}"
    health_check_interval = 10
    # on SIGTERM, running jobs get this long to finish before they are cancelled (and run again elsewhere)
    job_completion_wait = CHEAP_TIMEOUT
    # embeddings are CPU-bound and run in a thread; a few jobs at once keep the cores busy without thrashing
    max_jobs = 4
    # lanes and fair shares (service.core.lanes): the lane's virtual time follows the jobs taken, retries rejoin
    on_job_start = lanes.on_job_start
    after_job_end = lanes.after_job_end
    # ARQ starts every id of one read before it reads again, waiting for a free slot for each: with its default
    # (100) an interactive job queued meanwhile would wait for up to 100 bulk jobs. The running jobs are among the
    # ids read (they leave the queue when done), so one more than the slots commits at most one job ahead
    queue_read_limit = max_jobs + 1
    job_timeout = 900
    keep_result = 3600
    retry_jobs = True
