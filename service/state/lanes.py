"""Lanes and fair shares: the one rule that places every job in the single ARQ queue.

ARQ's queue is one sorted set; a worker takes the lowest-scored jobs whose score is at most the current time in ms.
Every job of this service is scored ``FLOOR[lane] + start`` instead of its enqueue time:

* **Lanes.** The floors are fixed instants long past (1973 and 1982), so every job is due at once and every
  interactive job (single assessments, companion judge jobs, adjudications, and their follow-on jobs and callbacks)
  sorts before every bulk job (batch items and theirs). A lane's scores stay below the next floor for any queue
  this service could hold (``start`` grows by the queued work's cost, about 3e11 units apart).
* **Fair shares within a lane** (start-time fair queueing, per tenant): a job's ``start`` is
  ``max(V, the tenant's last finish)`` and its finish is ``start + cost``; ``V``, the lane's virtual time, is the
  start of the latest job a worker took (advanced by the workers, :func:`on_job_start`). A tenant that queues
  1,000 jobs spreads them over the next 1,000 cost units of virtual time; another tenant's new job starts at ``V``
  and so runs after at most one job per busy tenant. A tenant idle for a while gets no credit for it.
  ``V`` moves with the work actually done, so no estimate of a job's duration enters (a wall-clock virtual time
  would let a flood that the workers serve slower than estimated fall behind the clock and queue newcomers
  behind it).

Both the tenants' finishes and ``V`` live in one Redis hash per queue and lane, updated by Lua scripts, so every
API replica and worker shares them. Losing that hash (a Redis without persistence) only resets the fair shares.

Jobs are queued by one Lua script (:func:`enqueue_many`: the fair-share reservation and ARQ's job records in one round
trip, which the API's submission waits for) writing what ARQ's ``enqueue_job`` writes. ARQ traps avoided here: its
job key's lifetime would be computed from ``score - enqueue time``, negative for these scores (the key gone at once),
so the key is given :data:`JOB_EXPIRES_MS` (in ms: ARQ's ``_expires`` reads a number as seconds, which made keys live
1,000 days); and a job that raises ``Retry`` is put back at ``now + defer`` (wall-clock ms, so behind both lanes once
due): :func:`after_job_end` records such a job and :func:`on_job_start` moves it back to the head of its lane when
its time comes.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any, Literal

from arq.constants import expires_extra_ms, in_progress_key_prefix, job_key_prefix, result_key_prefix
from arq.jobs import serialize_job

__all__ = [
    "FLOOR",
    "JOB_EXPIRES_MS",
    "Lane",
    "after_job_end",
    "cost_of",
    "enqueue",
    "enqueue_follow_on",
    "enqueue_many",
    "lane_of_meta",
    "lane_of_score",
    "on_job_start",
]

Lane = Literal["interactive", "bulk"]
INTERACTIVE: Lane = "interactive"
BULK: Lane = "bulk"
FLOOR: dict[Lane, int] = {INTERACTIVE: 100_000_000_000, BULK: 400_000_000_000}
# scores from here up are ARQ's own wall-clock ms (deferred retries, jobs queued without a lane)
WALL_CLOCK = 1_000_000_000_000
# ARQ's default lifetime of a job not deferred (a day), in ms as PSETEX takes it
JOB_EXPIRES_MS = expires_extra_ms
_STATE_TTL = 7 * 86400  # the fair-share state outlives any queued job (their keys expire after a day)

# KEYS: the lane's state hash, the queue, the deferred set. ARGV: the started job's start, now (ms), floors...
# Advances V, then moves retries whose time has come back into their lane at its virtual time.
_START = """
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
local s = tonumber(ARGV[1])
if s > v then
  v = s
  redis.call('HSET', KEYS[1], 'v', v)
  redis.call('EXPIRE', KEYS[1], %d)
end
local due = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2], 'LIMIT', 0, 20)
for _, member in ipairs(due) do
  local sep = string.find(member, '|', 1, true)
  local lane, job = string.sub(member, 1, sep - 1), string.sub(member, sep + 1)
  local score = tonumber(redis.call('ZSCORE', KEYS[2], job) or '0')
  if score >= %d and redis.call('EXISTS', '%s' .. job) == 0 then
    local lv = tonumber(redis.call('HGET', KEYS[2] .. ':lane:' .. lane, 'v') or '0')
    local floor = tonumber(ARGV[lane == 'bulk' and 4 or 3])
    redis.call('ZADD', KEYS[2], 'XX', floor + lv, job)
  end
  redis.call('ZREM', KEYS[3], member)
end
return v
""" % (_STATE_TTL, WALL_CLOCK, in_progress_key_prefix)

# KEYS: the queue, the deferred set. ARGV: job id, its lane. A job ARQ put back at a wall-clock score is recorded.
_AFTER = """
local score = tonumber(redis.call('ZSCORE', KEYS[1], ARGV[1]) or '0')
if score >= %d then
  redis.call('ZADD', KEYS[2], score, ARGV[2] .. '|' .. ARGV[1])
  redis.call('EXPIRE', KEYS[2], %d)
  return 1
end
return 0
""" % (WALL_CLOCK, _STATE_TTL)


def _state_key(queue: str, lane: Lane) -> str:
    return f"{queue}:lane:{lane}"


def _deferred_key(queue: str) -> str:
    return f"{queue}:lane-deferred"


def lane_of_meta(meta: Any) -> Lane:
    """An assessment's lane, for its first job and every follow-on: batch items are bulk, the rest interactive."""
    return BULK if getattr(meta, "batch_id", None) else INTERACTIVE


def cost_of(meta: Any) -> int:
    """What an assessment's job costs its tenant's share: its candidates (the work grows with them)."""
    return max(1, len(meta.request.candidates))


def lane_of_score(score: float) -> Lane | None:
    """The lane a queue score belongs to (None for ARQ's wall-clock scores)."""
    if FLOOR[INTERACTIVE] <= score < FLOOR[BULK]:
        return INTERACTIVE
    if FLOOR[BULK] <= score < WALL_CLOCK:
        return BULK
    return None


# KEYS: the lane's state hash, the queue. ARGV: tenant, the jobs' expiry (ms), the lane's floor, then per job its id,
# cost and serialized ARQ job. One round trip and one write for all the jobs (the API's submission waits for it):
# the tenant's jobs follow each other at their costs from max(V, its last finish), each queued as ARQ's enqueue_job
# queues it (the job key with its expiry, the id in the queue at its score) unless its id is queued or has a result
# already (ARQ's dedup: a replay never queues the same work twice). A shebang script: a full Redis refuses it whole,
# never half of it. Returns how many jobs were queued.
_ENQUEUE = """#!lua
local v = tonumber(redis.call('HGET', KEYS[1], 'v') or '0')
local f = tonumber(redis.call('HGET', KEYS[1], 't:' .. ARGV[1]) or '0')
local start = math.max(v, f)
local at = start
local queued = 0
for i = 4, #ARGV, 3 do
  local id = ARGV[i]
  local score = tonumber(ARGV[3]) + at
  at = at + tonumber(ARGV[i + 1])
  if redis.call('EXISTS', '%s' .. id, '%s' .. id) == 0 then
    redis.call('PSETEX', '%s' .. id, ARGV[2], ARGV[i + 2])
    redis.call('ZADD', KEYS[2], score, id)
    queued = queued + 1
  end
end
redis.call('HSET', KEYS[1], 't:' .. ARGV[1], at)
redis.call('EXPIRE', KEYS[1], %d)
return queued
""" % (job_key_prefix, result_key_prefix, job_key_prefix, _STATE_TTL)


async def enqueue_many(
    pool: Any, function: str, tenant: str, jobs: Sequence[tuple[tuple[Any, ...], str, int]], *, lane: Lane
) -> int:
    """Queue ``function(tenant, *args)`` for each ``(args, job_id, cost)`` of one tenant in ``lane``, in order, in one
    round trip; returns how many were queued. A job id already queued (or with a result) is left as it is."""
    if not jobs:
        return 0
    enqueue_time_ms = int(time.time() * 1000)
    argv: list[Any] = [tenant, JOB_EXPIRES_MS, FLOOR[lane]]
    for args, job_id, cost in jobs:
        # ARQ's own job record, as its worker reads it (the pool's serializer: pickle unless it says otherwise)
        payload = serialize_job(
            function, (tenant, *args), {}, None, enqueue_time_ms, serializer=getattr(pool, "job_serializer", None)
        )
        argv += [job_id, max(0, int(cost)), payload]
    queue = pool.default_queue_name
    return int(await pool.eval(_ENQUEUE, 2, _state_key(queue, lane), queue, *argv))


async def enqueue(pool: Any, function: str, tenant: str, *args: Any, job_id: str, lane: Lane, cost: int = 1) -> None:
    """Queue one job of ``tenant`` in ``lane`` (see :func:`enqueue_many`)."""
    await enqueue_many(pool, function, tenant, [(args, job_id, cost)], lane=lane)


async def enqueue_follow_on(pool: Any, function: str, meta: Any, *args: Any, job_id: str) -> None:
    """A job an assessment's job queues (its LLM tier, its callback): the assessment's lane, tenant and cost."""
    await enqueue(
        pool, function, meta.tenant, meta.id, *args, job_id=job_id, lane=lane_of_meta(meta), cost=cost_of(meta)
    )


async def on_job_start(ctx: dict[str, Any]) -> None:
    """Worker hook: the lane's virtual time moves to the start of the job taken; due retries rejoin their lane."""
    pool = ctx["redis"]
    queue = pool.default_queue_name
    score = float(ctx.get("score") or 0)
    lane = lane_of_score(score)
    start = int(score - FLOOR[lane]) if lane is not None else 0
    await pool.eval(
        _START,
        3,
        _state_key(queue, lane or INTERACTIVE),
        queue,
        _deferred_key(queue),
        start,
        int(time.time() * 1000),
        FLOOR[INTERACTIVE],
        FLOOR[BULK],
    )


async def after_job_end(ctx: dict[str, Any]) -> None:
    """Worker hook: a job of a lane that ARQ put back at a wall-clock score (a ``Retry``) is recorded, so that
    :func:`on_job_start` returns it to its lane when its deferral ends instead of leaving it behind both lanes."""
    lane = lane_of_score(float(ctx.get("score") or 0))
    if lane is None:
        return
    pool = ctx["redis"]
    queue = pool.default_queue_name
    await pool.eval(_AFTER, 2, queue, _deferred_key(queue), ctx["job_id"], lane)
