"""One retry policy for outbound HTTP (the LLM and embeddings clients), one Retry-After reader, one queue backoff.

Outbound HTTP (``RetryPolicy.delay``): a retryable failure is tried again up to ``max_retries`` times, after an
exponential backoff ``min(backoff_max, backoff_base * 2**retry)`` scaled by a uniform factor in ``1 +- jitter``;
a server's ``Retry-After`` replaces the backoff (plus a little upward jitter, so a herd of waiting callers spreads),
and one longer than ``max_retry_after`` is not waited for: the caller fails at once and can reschedule. A call with a
deadline gives up rather than sleep past it.

Queued work (``exponential``): a failed job is deferred 2, 4, 8, ... seconds (capped at a minute), a callback
``TRISK_CALLBACK_BACKOFF_SECONDS`` doubled per try (capped at five minutes); ARQ does the waiting.

The loops stay in the clients (an LLM call also meters, benches and times out against a deadline); a retry library
would hold the same rules in callbacks without removing any of them.
"""

from __future__ import annotations

import email.utils
import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

__all__ = [
    "CALLBACK_BACKOFF_CAP",
    "JOB_BACKOFF_BASE",
    "JOB_BACKOFF_CAP",
    "RetryPolicy",
    "callback_retry_delay",
    "exponential",
    "job_retry_delay",
    "parse_retry_after",
]

# a failed job waits 2, 4, 8, ... seconds, never more than a minute; a callback at most five minutes
JOB_BACKOFF_BASE = 2.0
JOB_BACKOFF_CAP = 60.0
CALLBACK_BACKOFF_CAP = 300.0


def exponential(tries: int, *, base: float, cap: float) -> float:
    """The wait after the ``tries``-th failure (1 = the first): ``base`` doubled per further try, at most ``cap``."""
    return float(min(cap, base * 2 ** max(0, tries - 1)))


def job_retry_delay(tries: int) -> float:
    """Seconds before the next try of a failed job: 2, 4, 8, ... capped at a minute."""
    return exponential(tries, base=JOB_BACKOFF_BASE, cap=JOB_BACKOFF_CAP)


def callback_retry_delay(tries: int, base: float) -> float:
    """Seconds before the next delivery of a callback that failed ``tries`` times: ``base``, doubled per try."""
    return exponential(tries, base=base, cap=CALLBACK_BACKOFF_CAP)


def parse_retry_after(value: str | None, *, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header: delta-seconds or an HTTP date; None when absent or garbled
    (NaN and infinity included)."""
    if value is None:
        return None
    value = value.strip()
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        pass
    else:
        return max(0.0, seconds) if math.isfinite(seconds) else None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    now = now or datetime.now(UTC)
    return max(0.0, (when - now).total_seconds())


@dataclass(frozen=True)
class RetryPolicy:
    """Retries of one outbound HTTP call (see the module docstring)."""

    max_retries: int = 4
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    jitter: float = 0.25
    # a Retry-After beyond this is not waited for: the call fails with UpstreamRateLimited(retry_after=...)
    max_retry_after: float = 60.0

    def backoff(self, retry: int) -> float:
        """The jittered wait before retry number ``retry + 1``."""
        delay = exponential(retry + 1, base=self.backoff_base, cap=self.backoff_max)
        return max(0.0, delay * random.uniform(1.0 - self.jitter, 1.0 + self.jitter))

    def delay(
        self,
        retries: int,
        *,
        retry_after: float | None = None,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> float | None:
        """Seconds to wait after a retryable failure when ``retries`` retries were made already; None = give up now
        (the retries are spent, the server asks for a wait over ``max_retry_after``, or it would pass ``deadline``,
        a ``clock()`` instant)."""
        if retries >= self.max_retries:
            return None
        if retry_after is not None:
            if retry_after > self.max_retry_after:
                return None
            delay = retry_after + random.uniform(0.0, self.jitter * self.backoff_base)
        else:
            delay = self.backoff(retries)
        if deadline is not None and clock() + delay >= deadline:
            return None
        return delay
