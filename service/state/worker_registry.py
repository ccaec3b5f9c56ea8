"""The one place workers publish their state in Redis: per worker a JSON record (release, start, last heartbeat, queue,
state and capabilities: the judge configuration, the index it loaded, its encoders), refreshed every few seconds
and gone a short TTL after the worker stops beating; ``live_workers`` is what the API reads (``/health/workers``,
``/v1/workers``, the ``trisk_workers_live`` metric).

A record lives under ``trisk:workers:{queue}:{worker id}`` with a TTL, and an index sorted set
``trisk:workers:{queue}`` holds the ids by last heartbeat, so reading is one ZRANGE and one MGET and an id whose
record expired is pruned by the next read. Records are decoded leniently (unknown fields ignored): an API of one
release reads the records of workers of the next.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

import msgspec

__all__ = [
    "HEARTBEAT_SECONDS",
    "RECORD_TTL_SECONDS",
    "Capabilities",
    "Heartbeat",
    "IndexState",
    "JudgeConfig",
    "WorkerRecord",
    "health_check_key",
    "live_workers",
    "record_key",
    "registry_key",
    "worker_id",
]

logger = logging.getLogger("trisk.workers")
# a beat every 5 s; a record outlives four missed beats (a GC pause or a CPU-starved node is not a dead worker),
# so a worker that is gone drops out of the list within 20 s
HEARTBEAT_SECONDS = 5.0
RECORD_TTL_SECONDS = 20


class JudgeConfig(msgspec.Struct, kw_only=True):
    """What a worker would judge with: whether it has an LLM provider, its default panel and that panel's models.
    The provider's URL is shown redacted (service.platform.redact); the key is never published."""

    llm_configured: bool
    provider: str | None = None
    panel: str = ""
    judge_models: list[str] = msgspec.field(default_factory=list)


class IndexState(msgspec.Struct, kw_only=True):
    """The novelty indexes a worker loaded at start (language -> signature id) and those it could not load."""

    signatures: dict[str, str] = msgspec.field(default_factory=dict)
    errors: dict[str, str] = msgspec.field(default_factory=dict)


class Capabilities(msgspec.Struct, kw_only=True):
    """What the worker can do; new releases add fields with defaults (older readers ignore them)."""

    judges: JudgeConfig
    index: IndexState = msgspec.field(default_factory=IndexState)
    embedding: dict[str, str] = msgspec.field(default_factory=dict)
    encoder_threads: int = 0


class WorkerRecord(msgspec.Struct, kw_only=True):
    """One worker as it last reported itself."""

    worker_id: str
    release: str
    started_at: float
    last_seen: float
    queue: str
    # "running" (the one state published today; a field, so a later release can add others without a new format)
    state: str
    capabilities: Capabilities


def worker_id() -> str:
    """Host (the pod's name in a cluster) and process id: one worker per process."""
    return f"{socket.gethostname()}:{os.getpid()}"


def registry_key(queue: str) -> str:
    return f"trisk:workers:{queue}"


def record_key(queue: str, wid: str) -> str:
    return f"{registry_key(queue)}:{wid}"


_decoder = msgspec.json.Decoder(WorkerRecord)


def health_check_key(queue: str) -> str:
    """arq's health record of this host's worker (``arq --check``, the worker pods' liveness probe): one key per host,
    so a live worker elsewhere cannot keep this one's liveness green."""
    return f"{queue}:health-check:{socket.gethostname()}"


# KEYS: the record, the index, arq's health record. ARGV: the record, its TTL, now, the index's TTL, whether to renew
# the health record (1/0) and its TTL in ms. allow-oom: a few hundred bytes that expire by themselves, written even
# when Redis is full, so a worker that waits for Redis to take writes again is seen alive rather than restarted
# (Redis 7 or later reads the flag)
_WRITE = """#!lua flags=allow-oom
redis.call('SET', KEYS[1], ARGV[1], 'EX', ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[7])
redis.call('EXPIRE', KEYS[2], ARGV[4])
if ARGV[5] == '1' then
  redis.call('SET', KEYS[3], 'waiting for Redis to take writes again', 'PX', ARGV[6])
end
return 1
"""
# arq's own TTL for its health record (health_check_interval + 1 s), which the heartbeat renews while arq waits
HEALTH_RECORD_TTL_MS = 11_000


async def _write(redis: Any, record: WorkerRecord, *, renew_health: bool = False) -> None:
    await redis.eval(
        _WRITE,
        3,
        record_key(record.queue, record.worker_id),
        registry_key(record.queue),
        health_check_key(record.queue),
        msgspec.json.encode(record),
        RECORD_TTL_SECONDS,
        record.last_seen,
        # the index lives as long as some worker beats: an abandoned queue's index expires with its last record
        RECORD_TTL_SECONDS * 3,
        int(renew_health),
        HEALTH_RECORD_TTL_MS,
        record.worker_id,
    )


async def live_workers(redis: Any, queue: str, *, now: float | None = None) -> list[WorkerRecord]:
    """The workers of ``queue`` whose record has not expired, oldest start first; prunes the ids of the others."""
    now = time.time() if now is None else now
    key = registry_key(queue)
    await redis.zremrangebyscore(key, "-inf", now - RECORD_TTL_SECONDS)
    ids = [i.decode() if isinstance(i, bytes) else str(i) for i in await redis.zrange(key, 0, -1)]
    if not ids:
        return []
    raw = await redis.mget([record_key(queue, i) for i in ids])
    records: list[WorkerRecord] = []
    gone = []
    for wid, body in zip(ids, raw, strict=True):
        if body is None:
            gone.append(wid)
            continue
        try:
            records.append(_decoder.decode(body))
        except msgspec.DecodeError as exc:  # a record this release cannot read: shown as missing, said in the log
            logger.warning("worker record %s unreadable: %s", wid, exc)
    if gone:
        await redis.zrem(key, *gone)
    return sorted(records, key=lambda r: (r.started_at, r.worker_id))


class Heartbeat:
    """A worker's record, published at start, refreshed every HEARTBEAT_SECONDS while it runs (through its drain too:
    arq offers no hook at SIGTERM), and deleted when it exits."""

    def __init__(
        self,
        redis: Any,
        queue: str,
        release: str,
        capabilities: Capabilities,
        *,
        pool_waiting: Callable[[], bool] = lambda: False,
    ) -> None:
        self.redis = redis
        # whether arq's pool waits for Redis to take writes again (then arq cannot write its health record)
        self.pool_waiting = pool_waiting
        now = time.time()
        self.record = WorkerRecord(
            worker_id=worker_id(),
            release=release,
            started_at=now,
            last_seen=now,
            queue=queue,
            state="running",
            capabilities=capabilities,
        )
        self._task: asyncio.Task[None] | None = None

    async def beat(self) -> None:
        self.record.last_seen = time.time()
        await _write(self.redis, self.record, renew_health=self.pool_waiting())

    async def _forever(self) -> None:
        while True:
            await asyncio.sleep(HEARTBEAT_SECONDS)
            try:
                await self.beat()
            except Exception as exc:  # Redis away: the record lapses and the worker reads as gone until it is back
                logger.warning("worker heartbeat not written: %s", exc)

    async def start(self) -> None:
        await self.beat()
        self._task = asyncio.create_task(self._forever())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        with contextlib.suppress(Exception):  # gone from the list now rather than after the TTL
            pipe = self.redis.pipeline(transaction=False)
            pipe.delete(record_key(self.record.queue, self.record.worker_id))
            pipe.zrem(registry_key(self.record.queue), self.record.worker_id)
            await pipe.execute()
