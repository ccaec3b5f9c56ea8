"""One failure policy and one logging/timing wrapper for every job (assessment tiers, judge jobs, callbacks).

A job's try either finishes, or fails. A failure that may pass (``FailurePolicy.retryable``: an upstream error,
Redis, the network, the durable store) is retried with a growing delay (``service.platform.retry``) while tries are
left (``MAX_TRIES``); anything else, or the last try, is recorded where the client sees it, with the reason
(``reason``). ARQ is given one spare delivery beyond ``MAX_TRIES`` so that a worker lost during the last try still
leaves a final state behind (``FailurePolicy.lost``). A job cancelled by ARQ's job timeout (or, for an LLM-tier
job, past its deadline) records that too; a worker shutdown instead leaves the job to ARQ, which runs it again
(``guarded``).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

from arq import Retry

from service.platform.errors import TriskError, Unavailable, UpstreamError
from service.platform.redis_client import REDIS_UNAVAILABLE
from service.platform.retry import job_retry_delay
from service.platform.settings import Settings
from service.platform.telemetry import log_context, timed_job
from workers.context import WorkerContext, tries_of

__all__ = [
    "CHEAP_JOB_TIMEOUT",
    "JOB_POLICY",
    "LLM_GRACE_SECONDS",
    "MAX_TRIES",
    "TRANSIENT",
    "FailurePolicy",
    "guarded",
    "llm_job_timeout",
    "observed",
    "reason",
    "retry_delay",
    "stopped_by_timeout",
]

logger = logging.getLogger("trisk.workers")
MAX_TRIES = 3  # deliveries of a job that may do work; ARQ's max_tries is one more (see the docstring)
# the LLM job's own backstop beyond its deadline (every call is already cut to the deadline; this catches the rest),
# and ARQ's job timeout beyond that (workers/settings.py): the job's own handling always runs before ARQ's
LLM_GRACE_SECONDS = 10.0
LLM_JOB_MARGIN_SECONDS = 60.0
# ARQ's timeout of the cheap job (a cold encoder and a first index load included) and of the SIGTERM drain
CHEAP_JOB_TIMEOUT = 120

# a dependency away for a moment (Redis, the network, the provider, and the durable store: a database that fails over
# or a partition that heals) is retried; tests/deploy/test_rehearsal.py cuts a worker off mid-job
TRANSIENT: tuple[type[BaseException], ...] = (UpstreamError, Unavailable, *REDIS_UNAVAILABLE, OSError)


def llm_job_timeout(settings: Settings) -> int:
    """ARQ's timeout of an LLM-tier job (assess_llm, judge, adjudicate): beyond the job's own deadline and backstop,
    so the job ends itself first (without a deadline, the longest an LLM job may run: 15 minutes)."""
    deadline = settings.llm.deadline_seconds
    return int(deadline + LLM_GRACE_SECONDS + LLM_JOB_MARGIN_SECONDS) if deadline > 0 else 900


def retry_delay(tries: int) -> float:
    """Seconds before the next try of a failed job (``service.platform.retry``; a test's ctx may replace it)."""
    return job_retry_delay(tries)


def reason(exc: BaseException) -> str:
    """What a failure reads where the client sees it."""
    return exc.detail if isinstance(exc, TriskError) else f"{type(exc).__name__}: {exc}"


def stopped_by_timeout(elapsed: float, limit: float, deadline: float = 0.0) -> bool:
    """Whether a job cancelled after ``elapsed`` seconds ran into ARQ's job timeout ``limit`` or (an LLM-tier job)
    its ``deadline``, rather than a worker shutdown, after which ARQ runs the job again."""
    return (deadline > 0 and elapsed >= deadline) or elapsed >= limit - 1.0


@dataclass(frozen=True)
class FailurePolicy:
    """Which failures are tried again, and for how many deliveries."""

    max_tries: int = MAX_TRIES
    retryable: tuple[type[BaseException], ...] = TRANSIENT

    def retries(self, exc: BaseException, tries: int) -> bool:
        """Whether the ``tries``-th delivery failing with ``exc`` is tried again."""
        return isinstance(exc, self.retryable) and tries < self.max_tries

    def retry(self, exc: BaseException, tries: int, delay: Callable[[int], float]) -> None:
        """Raise ARQ's Retry (after ``delay(tries)`` seconds) when ``exc`` is tried again; return when it is not."""
        if self.retries(exc, tries):
            raise Retry(defer=delay(tries)) from exc

    def lost(self, tries: int) -> bool:
        """A delivery beyond the last try happens only when a worker was lost during it: record that and stop."""
        return tries > self.max_tries

    @property
    def gave_up(self) -> str:
        return f"gave up after {self.max_tries} tries: the worker running it was lost"


JOB_POLICY = FailurePolicy()
# once an assessment's result is written only its tail is left: whatever fails there is tried again
TAIL_POLICY = FailurePolicy(retryable=(Exception,))


async def guarded(
    work: Awaitable[str],
    *,
    limit: float,
    deadline: float = 0.0,
    on_timeout: Callable[[], Awaitable[None]],
    on_failure: Callable[[Exception], Awaitable[str]],
) -> str:
    """Run one try of a job's work: a cancellation by ARQ's job timeout (``limit``) or past the ``deadline`` is
    recorded (``on_timeout``) and re-raised, never leaving the work running for good; a failure goes to
    ``on_failure`` (which records it, or raises ARQ's Retry); ARQ's Retry passes."""
    started = time.monotonic()
    try:
        return await work
    except asyncio.CancelledError:
        if stopped_by_timeout(time.monotonic() - started, limit, deadline):
            await on_timeout()
        raise
    except Retry:
        raise
    except Exception as exc:
        return await on_failure(exc)


JobBody = Callable[..., Coroutine[Any, Any, str]]


def observed(name: str | Callable[..., str], *, subject: int = 0) -> Callable[[JobBody], JobBody]:
    """ARQ's job function around ``body(worker, tries, tenant, *args)``: every job logs with its tenant and subject
    (``args[subject]``: the assessment's or the judge job's id) and is timed per outcome (the first word of its return
    value); ``name`` is the job's name in logs and metrics (or a function of the job's arguments)."""

    def wrap(body: JobBody) -> JobBody:
        @functools.wraps(body)
        async def run(ctx: dict[str, Any], tenant: str, *args: Any) -> str:
            job = name if isinstance(name, str) else name(tenant, *args)
            tries = tries_of(ctx)
            with log_context(tenant=tenant, assessment_id=args[subject]), timed_job(job) as timing:
                outcome: str = await body(WorkerContext.of(ctx), tries, tenant, *args)
                timing["outcome"] = outcome.split(";")[0].split(" ")[0]
                logger.info("%s try %s: %s", job, tries, outcome)
                return outcome

        return run

    return wrap
