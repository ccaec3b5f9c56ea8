"""Redis as the API and the workers reach it: what counts as Redis being away, and the error that says so.

Redis goes away for seconds when it restarts (and answers LOADING while it replays its AOF); the API answers 503 with
Retry-After meanwhile (service/app/problems.py maps these errors in one place) and the next request reconnects.
"""

from __future__ import annotations

import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from service.core.errors import RedisUnavailable

__all__ = ["REDIS_AWAY", "REDIS_WAIT_SECONDS", "redis_unavailable", "waiting_retry"]

# refused or reset connections, timeouts, and BusyLoadingError (a ConnectionError: Redis is replaying its AOF)
REDIS_AWAY: tuple[type[Exception], ...] = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
# how long a worker waits for a Redis that went away (a restart, an AOF replay) before it gives up and exits
REDIS_WAIT_SECONDS = 120


def waiting_retry() -> Retry:
    """Workers' Redis clients (arq's pool and the jobs' own) wait for a Redis that is away: every command and every
    reconnect is retried, backing off up to a second, for about REDIS_WAIT_SECONDS. redis-py retries a refused
    reconnect only when the retry names OSError: the pool reconnects outside the command's own retry."""
    return Retry(ExponentialBackoff(cap=1.0, base=0.05), REDIS_WAIT_SECONDS, (*REDIS_AWAY, OSError))  # type: ignore[arg-type]


def redis_unavailable(exc: Exception) -> RedisUnavailable:
    """The 503 for a Redis that is away, saying why without the URL (it may carry the password)."""
    if isinstance(exc, redis.exceptions.BusyLoadingError):
        why = "it is loading its data after a restart"
    elif isinstance(exc, redis.exceptions.TimeoutError):
        why = "it did not answer in time"
    else:
        why = f"it does not answer ({type(exc).__name__})"
    return RedisUnavailable(f"Redis is unavailable: {why}; retry shortly")
