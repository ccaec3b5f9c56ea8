"""The review queue in Redis: items (assessment id, candidate id) in budget order, leases with a visibility timeout.

Layout per tenant (every key carries the retention TTL of assessments, refreshed on each enqueue):
  trisk:t:{tenant}:rq:items       hash  item id -> item JSON (tenant, ids, filter attributes, risk/signals snapshot)
  trisk:t:{tenant}:rq:order       zset  every item, by priority (listing order)
  trisk:t:{tenant}:rq:avail       zset  items open for claiming (not leased, never reviewed), by priority
  trisk:t:{tenant}:rq:leased      zset  leased items by lease expiry (ms since the epoch, Redis clock)
  trisk:t:{tenant}:rq:item_lease  hash  item id -> lease id
  trisk:t:{tenant}:rq:leases      hash  lease id -> {reviewer, items, expires_ms, created_ms}
  trisk:t:{tenant}:rq:reviewed    hash  item id -> number of verdicts recorded

Priority: the candidate's ``risk.priority``, the one ranking (``service.core.ranking``: forced candidates first by
flag severity, then by risk score); higher is reviewed first. An item is *flagged* when it is forced, its budget tier
is not ``rest`` (top 20% or riskier), or it carries a flag of severity critical, major or minor (``info`` flags do
not count). Listing and claiming default to flagged items; ``scope=all`` includes every candidate.

Claims, renewals, releases and verdict bookkeeping are Lua scripts (atomic in Redis), so two reviewers never hold
the same item. Expired leases are swept inside every script: their unreviewed items go back to ``avail``.
"""

from __future__ import annotations

import hashlib
import time
import uuid
from typing import Any, Literal

import msgspec
from redis.asyncio import Redis

from service.core.budget import Budget
from service.core.errors import Conflict, InputError, NotFound
from service.core.records import LLM_SIGNALS, Routing
from service.core.risk import RiskResult
from service.core.store import AssessmentState
from service.core.types import Flag, SignalResult, SignalValue
from service.core.views import candidate_result

__all__ = [
    "FLAG_SEVERITIES",
    "ItemSnapshot",
    "Lease",
    "QueueItem",
    "ReviewQueue",
    "enqueue_for_review",
    "item_id_of",
    "queue_items",
    "signal_snapshot",
]

FLAG_SEVERITIES = ("critical", "major", "minor")
ItemStatus = Literal["open", "leased", "reviewed"]


class ItemSnapshot(msgspec.Struct):
    """What a verdict copies of its item: every signal, the flags, each GEMBA judge's score (None = invalid answer),
    the risk, routing and budget, and the model versions that scored it."""

    signals: dict[str, SignalResult]
    flags: list[Flag]
    judge_scores: dict[str, float | None]
    risk: RiskResult | None
    routing: Routing | None
    budget: Budget | None
    risk_models: list[str] | None


class QueueItem(msgspec.Struct):
    """One reviewable candidate, with the attributes the queue filters on and the snapshot a verdict copies."""

    id: str
    tenant: str
    assessment_id: str
    candidate_id: str
    enqueued_at: float
    priority: float
    flagged: bool
    forced: bool
    tier: str | None
    percentile: float | None
    lang: str
    model: str | None
    batch_id: str | None
    passage: str  # grouping key for cross-validation: the source ref, else a hash of the source text
    snapshot: ItemSnapshot


class Lease(msgspec.Struct):
    id: str
    tenant: str
    reviewer: str
    items: list[str]
    expires_at: float
    created_at: float


def item_id_of(assessment_id: str, candidate_id: str) -> str:
    """URL-safe item id: the assessment id and a short digest of the candidate id (which may hold any text)."""
    return f"{assessment_id}-{hashlib.sha256(candidate_id.encode()).hexdigest()[:12]}"


def _keys(tenant: str) -> dict[str, str]:
    base = f"trisk:t:{tenant}:rq:"
    return {k: base + k for k in ("items", "order", "avail", "leased", "item_lease", "leases", "reviewed")}


def signal_snapshot(state: AssessmentState, candidate_id: str) -> ItemSnapshot:
    """A candidate's results (``views.candidate_result``, the one merge) with GEMBA's per-judge scores."""
    model = next((c.model for c in state.meta.request.candidates if c.id == candidate_id), None)
    result = candidate_result(state, candidate_id, model)
    judges: dict[str, float | None] = {}
    gemba = result.signals.get(LLM_SIGNALS["gemba"])
    scores = gemba.detail.get("scores") if isinstance(gemba, SignalValue) else None
    if isinstance(scores, dict):
        judges = {str(jid): None if sc is None else float(sc) for jid, sc in scores.items()}
    return ItemSnapshot(
        signals=result.signals,
        flags=result.flags,
        judge_scores=judges,
        risk=result.risk,
        routing=result.routing,
        budget=result.budget,
        risk_models=state.published.risk_models if state.published is not None else None,
    )


def queue_items(tenant: str, state: AssessmentState) -> list[QueueItem]:
    """The queue items of an assessment's published result (final, else the cheap tier's): one per candidate."""
    meta = state.meta
    req = meta.request
    passage = req.source.ref or "sha:" + hashlib.sha256(req.source.text.encode()).hexdigest()[:16]
    now = time.time()
    out = []
    published = state.published
    for c in req.candidates:
        final = published.candidates.get(c.id) if published is not None else None
        if final is None:
            continue
        forced = final.risk.forced_severity is not None
        flagged = forced or final.budget.tier != "rest" or any(f.severity in FLAG_SEVERITIES for f in final.flags)
        out.append(
            QueueItem(
                id=item_id_of(meta.id, c.id),
                tenant=tenant,
                assessment_id=meta.id,
                candidate_id=c.id,
                enqueued_at=now,
                priority=final.risk.priority,
                flagged=flagged,
                forced=forced,
                tier=final.budget.tier,
                percentile=final.budget.percentile,
                lang=req.source.lang,
                model=c.model,
                batch_id=meta.batch_id,
                passage=passage,
                snapshot=signal_snapshot(state, c.id),
            )
        )
    return out


# -- Lua scripts. KEYS: 1 items, 2 order, 3 avail, 4 leased, 5 item_lease, 6 leases, 7 reviewed
_SWEEP = """
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function sweep(now)
  local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', now)
  for _, id in ipairs(expired) do
    redis.call('ZREM', KEYS[4], id)
    local lid = redis.call('HGET', KEYS[5], id)
    redis.call('HDEL', KEYS[5], id)
    if lid then redis.call('HDEL', KEYS[6], lid) end
    if not redis.call('HGET', KEYS[7], id) then
      local prio = redis.call('ZSCORE', KEYS[2], id)
      if prio then redis.call('ZADD', KEYS[3], prio, id) end
    end
  end
  return #expired
end
"""

_ENQUEUE = """
-- ARGV: ttl, refresh (1/0), then (id, priority, json) triples. A new item is added; an item already known keeps its
-- state (idempotent re-runs) and, with refresh, takes the new body and priority: the final result replacing the cheap
-- tier's. Its lease and verdicts are untouched (ZADD XX: a leased item is not made available again).
local ttl = tonumber(ARGV[1])
local refresh = ARGV[2] == '1'
local added = 0
for i = 3, #ARGV, 3 do
  local id, prio, body = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  if redis.call('HSETNX', KEYS[1], id, body) == 1 then
    redis.call('ZADD', KEYS[2], prio, id)
    redis.call('ZADD', KEYS[3], prio, id)
    added = added + 1
  elseif refresh then
    redis.call('HSET', KEYS[1], id, body)
    redis.call('ZADD', KEYS[2], 'XX', prio, id)
    redis.call('ZADD', KEYS[3], 'XX', prio, id)
  end
end
if ttl > 0 then
  for k = 1, 7 do redis.call('EXPIRE', KEYS[k], ttl) end
end
return added
"""

_CLAIM = (
    _SWEEP
    + """
-- ARGV: lease id, reviewer, n, lease ms, filter json, flagged only (1/0)
local now = now_ms()
sweep(now)
local lid, reviewer, n, lease_ms = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local filt = cjson.decode(ARGV[5])
local flagged_only = ARGV[6] == '1'
local expires = now + lease_ms
local taken = {}
local offset = 0
while #taken < n do
  local ids = redis.call('ZREVRANGE', KEYS[3], offset, offset + 199)
  if #ids == 0 then break end
  offset = offset + #ids
  for _, id in ipairs(ids) do
    local body = redis.call('HGET', KEYS[1], id)
    if body then
      local it = cjson.decode(body)
      local ok = (not flagged_only) or it['flagged'] == true
      for k, v in pairs(filt) do
        if it[k] ~= v then ok = false end
      end
      if ok then
        taken[#taken + 1] = id
        if #taken >= n then break end
      end
    end
  end
end
for _, id in ipairs(taken) do
  redis.call('ZREM', KEYS[3], id)
  redis.call('ZADD', KEYS[4], expires, id)
  redis.call('HSET', KEYS[5], id, lid)
end
if #taken > 0 then
  redis.call('HSET', KEYS[6], lid, cjson.encode({reviewer = reviewer, items = taken, expires_ms = expires,
    created_ms = now}))
end
return {tostring(expires), tostring(now), unpack(taken)}
"""
)

_RENEW = (
    _SWEEP
    + """
-- ARGV: lease id, reviewer, lease ms; returns the lease json, or an error code
local now = now_ms()
sweep(now)
local body = redis.call('HGET', KEYS[6], ARGV[1])
if not body then return {'gone'} end
local lease = cjson.decode(body)
if lease['reviewer'] ~= ARGV[2] then return {'not_yours', lease['reviewer']} end
local expires = now + tonumber(ARGV[3])
local held = {}
for _, id in ipairs(lease['items']) do
  if redis.call('HGET', KEYS[5], id) == ARGV[1] then
    redis.call('ZADD', KEYS[4], 'XX', expires, id)
    held[#held + 1] = id
  end
end
lease['expires_ms'] = expires
if #held == 0 then
  redis.call('HDEL', KEYS[6], ARGV[1])
  return {'empty'}
end
lease['items'] = held
redis.call('HSET', KEYS[6], ARGV[1], cjson.encode(lease))
return {'ok', cjson.encode(lease)}
"""
)

_RELEASE = (
    _SWEEP
    + """
-- ARGV: lease id, reviewer ('' = anyone); returns how many items went back to the queue, or an error code
local now = now_ms()
sweep(now)
local body = redis.call('HGET', KEYS[6], ARGV[1])
if not body then return {'gone'} end
local lease = cjson.decode(body)
if ARGV[2] ~= '' and lease['reviewer'] ~= ARGV[2] then return {'not_yours', lease['reviewer']} end
local released = 0
for _, id in ipairs(lease['items']) do
  if redis.call('HGET', KEYS[5], id) == ARGV[1] then
    redis.call('ZREM', KEYS[4], id)
    redis.call('HDEL', KEYS[5], id)
    if not redis.call('HGET', KEYS[7], id) then
      local prio = redis.call('ZSCORE', KEYS[2], id)
      if prio then
        redis.call('ZADD', KEYS[3], prio, id)
        released = released + 1
      end
    end
  end
end
redis.call('HDEL', KEYS[6], ARGV[1])
return {'ok', tostring(released)}
"""
)

_REVIEWED = (
    _SWEEP
    + """
-- ARGV: item id; the item leaves the open queue for good (a lease on it stays until released or expired)
sweep(now_ms())
redis.call('ZREM', KEYS[3], ARGV[1])
return redis.call('HINCRBY', KEYS[7], ARGV[1], 1)
"""
)

_SWEEP_ONLY = (
    _SWEEP
    + """
return sweep(now_ms())
"""
)

_item_dec = msgspec.json.Decoder(QueueItem)
_enc = msgspec.json.Encoder()
FILTER_FIELDS = ("tier", "lang", "model", "batch_id")


class ReviewQueue:
    """The tenant-scoped review queue over one Redis connection."""

    def __init__(self, redis: Redis, *, retention_seconds: int = 0) -> None:
        self.redis: Any = redis  # redis-py's async stubs type every command as sync | async
        self.ttl = max(0, retention_seconds)
        self._enqueue = redis.register_script(_ENQUEUE)
        self._claim = redis.register_script(_CLAIM)
        self._renew = redis.register_script(_RENEW)
        self._release = redis.register_script(_RELEASE)
        self._reviewed = redis.register_script(_REVIEWED)
        self._sweep = redis.register_script(_SWEEP_ONLY)

    @staticmethod
    def _klist(tenant: str) -> list[str]:
        k = _keys(tenant)
        return [k["items"], k["order"], k["avail"], k["leased"], k["item_lease"], k["leases"], k["reviewed"]]

    async def add(self, tenant: str, items: list[QueueItem], *, refresh: bool = False) -> int:
        """Add items (idempotent: known items keep their state; with ``refresh`` they take the new priority and
        snapshot); returns how many were new."""
        if not items:
            return 0
        if refresh:  # a known item keeps the time it joined the queue
            known = await self.redis.hmget(_keys(tenant)["items"], [it.id for it in items])
            items = [
                it if raw is None else msgspec.structs.replace(it, enqueued_at=_item_dec.decode(raw).enqueued_at)
                for it, raw in zip(items, known, strict=True)
            ]
        args: list[Any] = [self.ttl, "1" if refresh else "0"]
        for it in items:
            if it.tenant != tenant:
                raise InputError(f"item {it.id} belongs to tenant {it.tenant!r}, not {tenant!r}")
            args += [it.id, repr(it.priority), _enc.encode(it)]
        return int(await self._enqueue(keys=self._klist(tenant), args=args))

    async def item(self, tenant: str, item_id: str) -> QueueItem:
        raw = await self.redis.hget(_keys(tenant)["items"], item_id)
        if raw is None:
            raise NotFound(f"no review item {item_id!r}")
        return _item_dec.decode(raw)

    async def sweep(self, tenant: str) -> int:
        return int(await self._sweep(keys=self._klist(tenant), args=[]))

    async def status_of(self, tenant: str, item_ids: list[str]) -> list[tuple[ItemStatus, int, str | None]]:
        """(status, verdict count, lease id) per item."""
        k = _keys(tenant)
        async with self.redis.pipeline(transaction=False) as pipe:
            for iid in item_ids:
                pipe.hget(k["reviewed"], iid)
                pipe.hget(k["item_lease"], iid)
            res = await pipe.execute()
        out: list[tuple[ItemStatus, int, str | None]] = []
        for i in range(len(item_ids)):
            count = int(res[2 * i] or 0)
            lease = res[2 * i + 1].decode() if res[2 * i + 1] is not None else None
            status: ItemStatus = "leased" if lease else ("reviewed" if count else "open")
            out.append((status, count, lease))
        return out

    async def list(
        self,
        tenant: str,
        *,
        filters: dict[str, str],
        flagged_only: bool,
        status: str,
        offset: int,
        limit: int,
    ) -> tuple[list[tuple[QueueItem, ItemStatus, int, str | None]], int]:
        """Items in budget order (priority desc), filtered; returns one page and the total number that match."""
        await self.sweep(tenant)
        k = _keys(tenant)
        matched: list[tuple[QueueItem, ItemStatus, int, str | None]] = []
        total = 0
        start = 0
        chunk = 500
        while True:
            ids = [i.decode() for i in await self.redis.zrevrange(k["order"], start, start + chunk - 1)]
            if not ids:
                break
            start += len(ids)
            bodies = await self.redis.hmget(k["items"], ids)
            states = await self.status_of(tenant, ids)
            for body, (st, count, lease) in zip(bodies, states, strict=True):
                if body is None:
                    continue
                it = _item_dec.decode(body)
                if flagged_only and not it.flagged:
                    continue
                if any(getattr(it, f) != v for f, v in filters.items()):
                    continue
                if status == "pending" and st == "reviewed":
                    continue
                if status in ("open", "leased", "reviewed") and st != status:
                    continue
                if offset <= total < offset + limit:
                    matched.append((it, st, count, lease))
                total += 1
        return matched, total

    async def claim(
        self,
        tenant: str,
        reviewer: str,
        n: int,
        lease_seconds: float,
        *,
        filters: dict[str, str] | None = None,
        flagged_only: bool = True,
    ) -> Lease:
        """Lease up to ``n`` open items (budget order) to ``reviewer``; atomic, so no item goes to two reviewers."""
        if n <= 0:
            raise InputError(f"n must be at least 1 (got {n})")
        if lease_seconds <= 0:
            raise InputError(f"lease_seconds must be positive (got {lease_seconds})")
        lid = uuid.uuid4().hex
        filt = {f: v for f, v in (filters or {}).items() if v is not None}
        res = await self._claim(
            keys=self._klist(tenant),
            args=[lid, reviewer, n, int(lease_seconds * 1000), _enc.encode(filt), "1" if flagged_only else "0"],
        )
        expires_ms, now_ms = float(res[0]), float(res[1])
        items = [r.decode() for r in res[2:]]
        return Lease(lid, tenant, reviewer, items, expires_ms / 1000.0, now_ms / 1000.0)

    async def renew(self, tenant: str, lease_id: str, reviewer: str, lease_seconds: float) -> Lease:
        if lease_seconds <= 0:
            raise InputError(f"lease_seconds must be positive (got {lease_seconds})")
        res = await self._renew(keys=self._klist(tenant), args=[lease_id, reviewer, int(lease_seconds * 1000)])
        code = res[0].decode()
        if code == "gone":
            raise NotFound(
                f"no active lease {lease_id!r}: it expired (its items went back to the queue) or was released"
            )
        if code == "not_yours":
            raise Conflict(f"lease {lease_id!r} belongs to another reviewer")
        if code == "empty":
            raise Conflict(f"lease {lease_id!r} holds no items any more (reviewed, released or expired)")
        body = msgspec.json.decode(res[1])
        return Lease(
            lease_id,
            tenant,
            body["reviewer"],
            list(body["items"]),
            body["expires_ms"] / 1000.0,
            body["created_ms"] / 1000.0,
        )

    async def release(self, tenant: str, lease_id: str, reviewer: str | None = None) -> int:
        res = await self._release(keys=self._klist(tenant), args=[lease_id, reviewer or ""])
        code = res[0].decode()
        if code == "gone":
            raise NotFound(f"no active lease {lease_id!r}: it expired or was already released")
        if code == "not_yours":
            raise Conflict(f"lease {lease_id!r} belongs to another reviewer")
        return int(res[1])

    async def mark_reviewed(self, tenant: str, item_id: str) -> int:
        return int(await self._reviewed(keys=self._klist(tenant), args=[item_id]))

    async def delete_tenant(self, tenant: str) -> None:
        """Remove a tenant's queue keys (tests; never touches anything else)."""
        await self.redis.delete(*self._klist(tenant))


async def enqueue_for_review(
    redis: Redis, tenant: str, state: AssessmentState, *, retention_seconds: int = 0, refresh: bool = False
) -> int:
    """The worker hook: call when an assessment's result is published (the cheap tier's, then with ``refresh`` the
    final one). Adds every candidate to the tenant's review queue (idempotent); returns how many items were new."""
    if state.meta.tenant != tenant:
        raise InputError(f"assessment {state.meta.id} belongs to tenant {state.meta.tenant!r}, not {tenant!r}")
    return await ReviewQueue(redis, retention_seconds=retention_seconds).add(
        tenant, queue_items(tenant, state), refresh=refresh
    )
