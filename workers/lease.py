"""Short, renewed leases on running jobs, so a lost worker's job runs again within seconds, not arq's timeout + 10 s.

arq marks a job it starts with ``arq:in-progress:<job id>`` and gives that key one TTL for every job of the worker:
the longest function timeout + 10 s (910 s with ``assess_llm``'s 900 s), whatever the job. While the key lives no
other worker takes the job, so a SIGKILLed worker's cheap job would wait 15 minutes. Here the key is cut to the
lease (``TRISK_JOB_LEASE_SECONDS``, 15 s) as the job starts (``on_job_start``) and renewed every third of it while
the job runs; arq deletes it when the job ends. A worker that dies, or stalls longer than the lease, lets another
take the job after at most the lease: jobs are idempotent (workers/assessment_jobs.py), so a stalled worker waking up
beside the new run changes nothing (tests/workers/test_crashes.py). Only a worker lost in the milliseconds between
picking a job and starting it leaves arq's own TTL in place.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from arq.constants import in_progress_key_prefix

from workers.context import WorkerContext

__all__ = ["hold", "release"]

logger = logging.getLogger("trisk.workers")
# renewed three times per lease: an event loop may stall for two thirds of it (GC, a CPU-starved node) before a
# second worker starts the same job, which is harmless (idempotent) and only costs the work twice
RENEWALS_PER_LEASE = 3


async def _renew(redis: Any, key: str, lease_ms: int) -> None:
    while True:
        await asyncio.sleep(lease_ms / 1000 / RENEWALS_PER_LEASE)
        try:
            if not await redis.pexpire(key, lease_ms):
                return  # arq deleted the key: the job ended
        except Exception as exc:  # Redis away: the lease may lapse and another worker re-run the job (idempotent)
            logger.warning("lease on %s not renewed: %s", key, exc)


async def hold(ctx: dict[str, Any]) -> None:
    """``on_job_start``: shorten the job's in-progress key to the lease and keep renewing it while the job runs."""
    lease_ms = int(WorkerContext.of(ctx).settings.jobs.lease_seconds * 1000)
    if lease_ms <= 0:
        return  # leases off: arq's own TTL (the longest job timeout + 10 s) decides
    key = in_progress_key_prefix + ctx["job_id"]
    try:
        await ctx["redis"].pexpire(key, lease_ms)
    except Exception as exc:  # arq's own (longer) TTL stays: recovery is slower, nothing is lost
        logger.warning("lease on %s not taken: %s", key, exc)
    ctx["lease"] = asyncio.create_task(_renew(ctx["redis"], key, lease_ms))


async def release(ctx: dict[str, Any]) -> None:
    """``on_job_end`` (the same ``ctx`` as ``hold``'s): stop renewing; arq deletes or keeps the key as it decides."""
    task = ctx.pop("lease", None)
    if task is not None:
        task.cancel()
