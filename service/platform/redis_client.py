"""Redis as the API and the workers reach it: what counts as Redis being unavailable, and the error that says so.

Two ways Redis cannot take a request for a while, named here once for the API, the workers and the health checks:

* **away** (``REDIS_AWAY``): refused or reset connections, timeouts, LOADING while it replays its AOF after a restart;
* **refusing writes** (``REDIS_REFUSING``): it answers, but will not write now: full (``OOM``, ``maxmemory`` reached
  under ``noeviction``), a replica after a failover (``READONLY``, ``MASTERDOWN``), a failed snapshot
  (``MISCONF``), a script running too long (``BUSY``), too few replicas (``NOREPLICAS``), a cluster moving slots
  (``TRYAGAIN``, ``CLUSTERDOWN``).

The API answers both with 503 problem+json and Retry-After (service/app/problems.py maps them in one place); the
workers' clients wait both out (:func:`waiting_retry`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import redis.exceptions
from redis._parsers.base import BaseParser
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff

from service.platform.errors import RedisUnavailable

__all__ = [
    "REDIS_AWAY",
    "REDIS_REFUSING",
    "REDIS_UNAVAILABLE",
    "REDIS_WAIT_SECONDS",
    "BusyError",
    "MisconfError",
    "NoReplicasError",
    "WaitState",
    "WaitingRetry",
    "redis_unavailable",
    "waiting_retry",
]

logger = logging.getLogger("trisk.redis")
T = TypeVar("T")


class MisconfError(redis.exceptions.ResponseError):
    """MISCONF: Redis could not save a snapshot and stops writes (``stop-writes-on-bgsave-error``)."""


class BusyError(redis.exceptions.ResponseError):
    """BUSY: a script or function runs past ``busy-reply-threshold``; Redis answers nothing else until it ends."""


class NoReplicasError(redis.exceptions.ResponseError):
    """NOREPLICAS: fewer replicas than ``min-replicas-to-write`` acknowledge writes."""


# redis-py names OOM, READONLY and LOADING itself; these codes it leaves as a bare ResponseError (the cluster ones only
# for its cluster client): each gets its class, so that a retry and a handler can tell them by type. Error codes are
# whole first words: BUSYKEY and BUSYGROUP are not BUSY.
for _code, _cls in {
    "MISCONF": MisconfError,
    "BUSY": BusyError,
    "NOREPLICAS": NoReplicasError,
    "MASTERDOWN": redis.exceptions.MasterDownError,
    "TRYAGAIN": redis.exceptions.TryAgainError,
    "CLUSTERDOWN": redis.exceptions.ClusterDownError,
}.items():
    BaseParser.EXCEPTION_CLASSES.setdefault(_code, _cls)

# refused or reset connections, timeouts, and BusyLoadingError (a ConnectionError: Redis is replaying its AOF)
REDIS_AWAY: tuple[type[Exception], ...] = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)
# Redis answers but takes no write for now; with the Retry-After the API gives for each (a full Redis frees memory as
# keys expire or an operator raises maxmemory, in minutes rather than seconds; a failover or a script in seconds)
_REFUSALS: dict[type[Exception], tuple[str, float]] = {
    redis.exceptions.OutOfMemoryError: ("it is full (maxmemory reached) and takes no writes", 30.0),
    redis.exceptions.ReadOnlyError: ("it is a read-only replica (a failover is under way)", 2.0),
    redis.exceptions.MasterDownError: ("its primary is down", 2.0),
    MisconfError: ("it stopped writes after a failed snapshot", 30.0),
    BusyError: ("it is busy running a script", 5.0),
    NoReplicasError: ("too few replicas acknowledge writes", 5.0),
    redis.exceptions.TryAgainError: ("its cluster is moving keys", 2.0),
    redis.exceptions.ClusterDownError: ("its cluster is down", 5.0),
}
REDIS_REFUSING: tuple[type[Exception], ...] = tuple(_REFUSALS)
REDIS_UNAVAILABLE: tuple[type[Exception], ...] = (*REDIS_AWAY, *REDIS_REFUSING)
# how long a worker waits for a Redis that went away (a restart, an AOF replay) before it gives up and exits
REDIS_WAIT_SECONDS = 120
# how often a worker that waits for a Redis refusing writes says so in its log
_REFUSAL_LOG_SECONDS = 30.0


class WaitState:
    """What the copies of one :class:`WaitingRetry` share (redis-py gives every connection a deep copy of it): how many
    commands wait on a Redis that refuses writes now, and when that was last logged."""

    def __init__(self) -> None:
        self.waiting = 0
        self.last_log = 0.0


class WaitingRetry(Retry):
    """redis-py's retry, told apart by cause: a Redis that is *away* is waited for about REDIS_WAIT_SECONDS tries
    (then the error is raised: the worker exits and its supervisor starts it again, which reaches a Redis that moved);
    a Redis that *refuses writes* is waited for as long as it lasts, since a restarted worker would meet the same
    full Redis (a crash loop). Both back off up to a second; ``state.waiting`` counts the commands that wait on a
    refusal now, over every connection of the client (the heartbeat keeps the health record alive meanwhile)."""

    __slots__ = ("state",)

    def __init__(self, state: WaitState | None = None) -> None:
        supported = (*REDIS_UNAVAILABLE, OSError)
        super().__init__(ExponentialBackoff(cap=1.0, base=0.05), REDIS_WAIT_SECONDS, supported)
        self.state = state or WaitState()

    def __deepcopy__(self, memo: dict[int, Any]) -> WaitingRetry:
        copy = WaitingRetry(self.state)  # each connection's copy counts into the one state
        copy._supported_errors = self._supported_errors
        return copy

    async def call_with_retry(self, do: Callable[[], Awaitable[T]], fail: Callable[[Any], Any]) -> T:
        self._backoff.reset()
        failures = 0
        counted = False
        try:
            while True:
                try:
                    return await do()
                except self._supported_errors as error:
                    await fail(error)  # disconnects; raises what is not retried (and a lost WATCH as WatchError)
                    refused = isinstance(error, REDIS_REFUSING)
                    if refused:
                        if not counted:
                            counted = True
                            self.state.waiting += 1
                        self._log(error)
                    else:
                        failures += 1
                        if failures > self._retries:
                            raise error
                    await asyncio.sleep(1.0 if refused else self._backoff.compute(failures))
        finally:
            if counted:
                self.state.waiting -= 1

    def _log(self, error: Exception) -> None:
        now = time.monotonic()
        if now - self.state.last_log >= _REFUSAL_LOG_SECONDS:
            self.state.last_log = now
            logger.warning("waiting for Redis to take writes again: %s", redis_unavailable(error).detail)


def waiting_retry() -> WaitingRetry:
    """Workers' Redis clients (arq's pool and the jobs' own) wait for a Redis that is away or refuses writes: every
    command and every reconnect is retried (see :class:`WaitingRetry`). redis-py retries a refused reconnect only
    when the retry names OSError: the pool reconnects outside the command's own retry. The client must also be given
    ``retry_on_error=list(REDIS_UNAVAILABLE)``."""
    return WaitingRetry()


def redis_unavailable(exc: Exception) -> RedisUnavailable:
    """The 503 for a Redis that is away or refuses writes, saying why without the URL (it may carry the password),
    with the Retry-After that fits the cause."""
    retry_after: float | None = None
    if isinstance(exc, redis.exceptions.BusyLoadingError):
        why = "it is loading its data after a restart"
    elif isinstance(exc, redis.exceptions.TimeoutError):
        why = "it did not answer in time"
    elif isinstance(exc, REDIS_REFUSING):
        why, retry_after = next(v for cls, v in _REFUSALS.items() if isinstance(exc, cls))
    else:
        why = f"it does not answer ({type(exc).__name__})"
    error = RedisUnavailable(f"Redis is unavailable: {why}; retry shortly")
    if retry_after is not None:
        error.retry_after = retry_after
    return error
