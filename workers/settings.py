"""``WorkerSettings`` for ``arq workers.settings.WorkerSettings``: jobs, timeouts, retries, health key."""

from __future__ import annotations

import dataclasses
from typing import Any

from arq.connections import RedisSettings
from arq.worker import func

from service.platform.redis_client import REDIS_UNAVAILABLE, waiting_retry
from service.platform.settings import get_settings
from service.platform.telemetry import configure_logging, logging_config, start_metrics_server
from service.state import lanes
from service.state.worker_registry import HEALTH_RECORD_TTL_MS
from service.state.worker_registry import health_check_key as arq_health_key
from workers import lease
from workers.assessment_jobs import assess_cheap, assess_llm
from workers.callback_jobs import deliver_callback
from workers.judge_jobs import adjudicate, judge
from workers.lifecycle import shutdown, startup
from workers.policy import CHEAP_JOB_TIMEOUT, MAX_TRIES, llm_job_timeout

__all__ = ["LOG_CONFIG", "WorkerSettings", "redis_settings"]

_settings = get_settings()
# `arq --custom-log-dict workers.settings.LOG_CONFIG ...`: arq's own lines, from its first, in the service's format
LOG_CONFIG = logging_config(_settings.api.log_format)
# beyond the LLM deadline and the job's own backstop: the job ends itself (a final result with the reason) first
LLM_TIMEOUT = llm_job_timeout(_settings)


def redis_settings(url: str) -> RedisSettings:
    """arq's connection: every command, and every reconnect, waits for a Redis that is away or refuses writes,
    backing off up to a second between tries, so the worker's loop carries on by itself when Redis is back (arq ends
    the worker on the first error its loop sees). A Redis away for more than about REDIS_WAIT_SECONDS ends the worker
    (its supervisor starts it again); a full one is waited out for as long as it lasts (a new worker would meet the
    same full Redis), the health record kept alive meanwhile (service.state.worker_registry.Heartbeat)."""
    return dataclasses.replace(
        RedisSettings.from_dsn(url), retry_on_error=list(REDIS_UNAVAILABLE), retry=waiting_retry()
    )


async def on_worker_start(ctx: dict[str, Any]) -> None:
    """The worker process as the ``arq`` command runs it: structured logs, its metrics port, then the jobs' clients."""
    configure_logging(_settings.api.log_format)
    if _settings.api.worker_metrics_port:
        start_metrics_server(_settings.api.worker_metrics_port)
    await startup(ctx)


async def on_job_start(ctx: dict[str, Any]) -> None:
    """As a job starts: its lease (a lost worker's job runs again after TRISK_JOB_LEASE_SECONDS, not after the longest
    job timeout + 10 s), then its lane (the lane's virtual time follows the jobs taken; due retries rejoin it)."""
    await lease.hold(ctx)
    await lanes.on_job_start(ctx)


class WorkerSettings:
    """A plain arq settings class; every job is idempotent (keyed by assessment and part). Assessment and judge jobs
    get one delivery beyond their own ``MAX_TRIES`` so a worker lost on the last try still leaves a final state. The
    job names are what queued jobs carry: a worker of the next release must still know every one of them."""

    functions = [  # arq reads these class attributes
        func(assess_cheap, name="assess_cheap", timeout=CHEAP_JOB_TIMEOUT, max_tries=MAX_TRIES + 1),
        func(assess_llm, name="assess_llm", timeout=LLM_TIMEOUT, max_tries=MAX_TRIES + 1),
        func(
            deliver_callback, name="deliver_callback", timeout=30, max_tries=max(1, _settings.jobs.callback_max_tries)
        ),
        func(adjudicate, name="adjudicate", timeout=LLM_TIMEOUT, max_tries=MAX_TRIES + 1),
        func(judge, name="judge", timeout=LLM_TIMEOUT, max_tries=MAX_TRIES + 1),
    ]
    on_startup = on_worker_start
    on_shutdown = shutdown
    # the lease, then the lane (on_job_start below); the lease ends with the job
    on_job_end = lease.release
    redis_settings = redis_settings(_settings.redis.url)
    queue_name = _settings.redis.queue_name
    health_check_key = arq_health_key(_settings.redis.queue_name)
    health_check_interval = HEALTH_RECORD_TTL_MS // 1000 - 1  # arq's record lives this + 1 s
    # on SIGTERM, running jobs get this long to finish before they are cancelled (and run again elsewhere)
    job_completion_wait = CHEAP_JOB_TIMEOUT
    # embeddings are CPU-bound and run in a thread; a few jobs at once keep the cores busy without thrashing
    max_jobs = 4
    on_job_start = on_job_start
    after_job_end = lanes.after_job_end
    # ARQ starts every id of one read before it reads again, waiting for a free slot for each: with its default
    # (100) an interactive job queued meanwhile would wait for up to 100 bulk jobs. The running jobs are among the
    # ids read (they leave the queue when done), so one more than the slots commits at most one job ahead
    queue_read_limit = max_jobs + 1
    job_timeout = 900
    keep_result = 3600
    retry_jobs = True
