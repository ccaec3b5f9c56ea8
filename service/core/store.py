"""Redis persistence of assessments and batches, keyed by tenant; shared by the API and the workers.

Layout (every key expires after the retention setting):
  trisk:t:{tenant}:a:{id}       hash: meta, part:cheap, provisional, part:llm, final, tail, tail_error, started,
                                failed, callback, callback:cheap
  trisk:t:{tenant}:idem:{key}   the assessment an Idempotency-Key created, with the request's hash
  trisk:t:{tenant}:b:{id}       hash: meta
  trisk:t:{tenant}:seen:{rule}  sorted set of risk scores the service has produced with one model version
Workers write one hash field each, so parallel parts never overwrite each other; ``final`` is written once (HSETNX)
and ``tail`` marks that everything after it (scores pooled, review items, callback job) has been done.
``provisional`` (also written once) is the cheap tier's result, published while the LLM tier still works.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

import msgspec
from redis.asyncio import Redis

from service.core.errors import Conflict, NotFound
from service.core.records import (
    AssessmentMeta,
    BatchMeta,
    CallbackEvent,
    CallbackState,
    CheapPart,
    FinalPart,
    LLMPart,
    Status,
    callback_events,
)

__all__ = ["AssessmentState", "Store", "request_hash"]

logger = logging.getLogger("trisk.store")

_enc = msgspec.json.Encoder()
_meta_dec = msgspec.json.Decoder(AssessmentMeta)
_batch_dec = msgspec.json.Decoder(BatchMeta)
_cheap_dec = msgspec.json.Decoder(CheapPart)
_llm_dec = msgspec.json.Decoder(LLMPart)
_final_dec = msgspec.json.Decoder(FinalPart)
_cb_dec = msgspec.json.Decoder(CallbackState)


# KEYS: idempotency key, assessment key. ARGV: claim json, meta json, callback json ('' = none), ttl (0 = none).
# Returns the existing claim, or nil after writing the claim and the assessment together.
_CREATE_IDEMPOTENT = """
local prior = redis.call('GET', KEYS[1])
if prior then return prior end
local ttl = tonumber(ARGV[4])
if ttl > 0 then redis.call('SET', KEYS[1], ARGV[1], 'EX', ttl) else redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('HSET', KEYS[2], 'meta', ARGV[2])
if ARGV[3] ~= '' then redis.call('HSET', KEYS[2], 'callback', ARGV[3]) end
if ttl > 0 then redis.call('EXPIRE', KEYS[2], ttl) end
return false
"""


def request_hash(body: bytes) -> str:
    return hashlib.sha256(body).hexdigest()


@dataclass
class AssessmentState:
    """Everything stored about one assessment."""

    meta: AssessmentMeta
    cheap: CheapPart | None = None
    llm: LLMPart | None = None
    final: FinalPart | None = None
    started: bool = False
    failed: str | None = None
    callback: CallbackState | None = None
    tail_done: bool = False
    tail_error: str | None = None
    provisional: FinalPart | None = None
    cheap_callback: CallbackState | None = None

    @property
    def published(self) -> FinalPart | None:
        """The result a reader sees: the final one, else the cheap tier's provisional one."""
        return self.final if self.final is not None else self.provisional

    def callback_of(self, event: CallbackEvent) -> CallbackState | None:
        return self.callback if event == "final" else self.cheap_callback

    @property
    def status(self) -> Status:
        if self.failed is not None:
            return "failed"
        if self.final is not None:
            return "done"
        if self.provisional is not None:
            return "partial"
        if self.started or self.cheap is not None:
            return "running"
        return "pending"


class Store:
    """Typed access to trisk's Redis keys."""

    def __init__(self, redis: Redis, *, retention_seconds: int) -> None:
        # redis-py's stubs type commands as "Awaitable | value" for the sync/async union; we only use the async client
        self.redis: Any = redis
        self.ttl = retention_seconds if retention_seconds > 0 else None
        self._create_idem = redis.register_script(_CREATE_IDEMPOTENT)

    @staticmethod
    def _a(tenant: str, aid: str) -> str:
        return f"trisk:t:{tenant}:a:{aid}"

    @staticmethod
    def _b(tenant: str, bid: str) -> str:
        return f"trisk:t:{tenant}:b:{bid}"

    @staticmethod
    def _idem(tenant: str, key: str) -> str:
        return f"trisk:t:{tenant}:idem:{key}"

    async def _expire(self, pipe: Any, key: str) -> None:
        if self.ttl:
            pipe.expire(key, self.ttl)

    # -- idempotency
    async def create_idempotent(self, meta: AssessmentMeta, key: str, body_sha: str) -> str | None:
        """Claim an Idempotency-Key and write the assessment in one atomic step, so whoever sees the key also sees
        the assessment. Returns the id of the assessment the key already names when the same request was made
        before (nothing is written then); raises Conflict when the key was used for a different request."""
        value = _enc.encode({"id": meta.id, "sha": body_sha})
        callback = _final_callback(meta) or b""
        prior = await self._create_idem(
            keys=[self._idem(meta.tenant, key), self._a(meta.tenant, meta.id)],
            args=[value, _enc.encode(meta), callback, self.ttl or 0],
        )
        if prior is None:
            return None
        claimed = msgspec.json.decode(prior)
        if claimed["sha"] != body_sha:
            raise Conflict(
                f"Idempotency-Key {key!r} was already used with a different request body",
                extra={"assessment_id": claimed["id"]},
            )
        return str(claimed["id"])

    async def release_idempotency(self, tenant: str, key: str) -> None:
        await self.redis.delete(self._idem(tenant, key))

    # -- assessments
    async def create(self, meta: AssessmentMeta) -> None:
        key = self._a(meta.tenant, meta.id)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "meta", _enc.encode(meta))
            if callback := _final_callback(meta):
                pipe.hset(key, "callback", callback)
            await self._expire(pipe, key)
            await pipe.execute()

    async def create_many(self, metas: list[AssessmentMeta], batch: BatchMeta | None = None) -> None:
        """All or nothing: one MULTI/EXEC for every assessment of a batch (and the batch itself)."""
        async with self.redis.pipeline(transaction=True) as pipe:
            for meta in metas:
                key = self._a(meta.tenant, meta.id)
                pipe.hset(key, "meta", _enc.encode(meta))
                if callback := _final_callback(meta):
                    pipe.hset(key, "callback", callback)
                await self._expire(pipe, key)
            if batch is not None:
                bkey = self._b(batch.tenant, batch.id)
                pipe.hset(bkey, "meta", _enc.encode(batch))
                await self._expire(pipe, bkey)
            await pipe.execute()

    async def delete(self, tenant: str, aids: list[str], batch_id: str | None = None) -> None:
        keys = [self._a(tenant, a) for a in aids] + ([self._b(tenant, batch_id)] if batch_id else [])
        if keys:
            await self.redis.delete(*keys)

    async def get(self, tenant: str, aid: str) -> AssessmentState:
        fields = await self.redis.hgetall(self._a(tenant, aid))
        if not fields or b"meta" not in fields:
            raise NotFound(f"no assessment {aid!r}")
        return _state_of(fields)

    async def get_many(self, tenant: str, aids: list[str]) -> list[AssessmentState | None]:
        async with self.redis.pipeline(transaction=False) as pipe:
            for aid in aids:
                pipe.hgetall(self._a(tenant, aid))
            rows = await pipe.execute()
        return [_state_of(r) if r and b"meta" in r else None for r in rows]

    async def exists(self, tenant: str, aid: str) -> bool:
        return bool(await self.redis.hexists(self._a(tenant, aid), "meta"))

    async def mark_started(self, tenant: str, aid: str) -> None:
        await self.redis.hset(self._a(tenant, aid), "started", b"1")

    async def put_cheap(self, tenant: str, aid: str, part: CheapPart) -> bool:
        """Write the cheap tier's part once; False when another delivery wrote it first."""
        return bool(await self.redis.hsetnx(self._a(tenant, aid), "part:cheap", _enc.encode(part)))

    async def put_llm(self, tenant: str, aid: str, part: LLMPart) -> bool:
        """Write the LLM tier's part once; False when another delivery wrote it first."""
        return bool(await self.redis.hsetnx(self._a(tenant, aid), "part:llm", _enc.encode(part)))

    async def put_final(self, tenant: str, aid: str, part: FinalPart) -> bool:
        """Write the final result once; False when another run of the job got there first (its result stands)."""
        return bool(await self.redis.hsetnx(self._a(tenant, aid), "final", _enc.encode(part)))

    async def llm_started_at(self, tenant: str, aid: str) -> float:
        """When the LLM tier of this assessment first started (written once: every try counts from it)."""
        key = self._a(tenant, aid)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, "llm_started", repr(time.time()))
            pipe.hget(key, "llm_started")
            _, raw = await pipe.execute()
        return float(raw)

    async def put_provisional(self, tenant: str, aid: str, part: FinalPart) -> bool:
        """Publish the cheap tier's result once; False when another delivery published it first."""
        return bool(await self.redis.hsetnx(self._a(tenant, aid), "provisional", _enc.encode(part)))

    async def get_final(self, tenant: str, aid: str) -> FinalPart | None:
        raw = await self.redis.hget(self._a(tenant, aid), "final")
        return None if raw is None else _final_dec.decode(raw)

    async def mark_tail_done(self, tenant: str, aid: str) -> None:
        await self.redis.hset(self._a(tenant, aid), "tail", b"done")

    async def mark_tail_failed(self, tenant: str, aid: str, reason: str) -> None:
        """The result stands, but what follows it (review items, callback) could not be done: say so."""
        await self.redis.hset(self._a(tenant, aid), "tail_error", reason.encode())

    async def mark_failed(self, tenant: str, aid: str, reason: str) -> None:
        await self.redis.hset(self._a(tenant, aid), "failed", reason.encode())

    async def put_callback(self, tenant: str, aid: str, state: CallbackState, event: CallbackEvent = "final") -> None:
        await self.redis.hset(self._a(tenant, aid), _CALLBACK_FIELDS[event], _enc.encode(state))

    async def open_callback(self, tenant: str, aid: str, url: str, event: CallbackEvent) -> None:
        """The pending state of a callback the worker is about to queue (kept when it exists: jobs are re-run)."""
        await self.redis.hsetnx(self._a(tenant, aid), _CALLBACK_FIELDS[event], _enc.encode(CallbackState(url=url)))

    # -- budget reference: scores seen per model version
    async def record_scores(self, tenant: str, rule: str, members: dict[str, float]) -> None:
        if not members:
            return
        key = f"trisk:t:{tenant}:seen:{rule}"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(key, members)
            await self._expire(pipe, key)
            await pipe.execute()

    async def seen_counts(self, tenant: str, rule: str, scores: list[float]) -> tuple[int, list[int]]:
        """How many scores this tenant has seen for a model version, and how many of them lie at or below each."""
        key = f"trisk:t:{tenant}:seen:{rule}"
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zcard(key)
            for s in scores:
                pipe.zcount(key, "-inf", s)
            res = await pipe.execute()
        return int(res[0]), [int(v) for v in res[1:]]

    # -- batches
    async def get_batch(self, tenant: str, bid: str) -> BatchMeta:
        raw = await self.redis.hget(self._b(tenant, bid), "meta")
        if raw is None:
            raise NotFound(f"no batch {bid!r}")
        return _batch_dec.decode(raw)


_CALLBACK_FIELDS: dict[CallbackEvent, str] = {"final": "callback", "cheap": "callback:cheap"}


def _final_callback(meta: AssessmentMeta) -> bytes | None:
    """The final callback's pending state, written with the assessment when the request asks for it."""
    if "final" not in callback_events(meta.request):
        return None
    return _enc.encode(CallbackState(url=str(meta.request.callback_url)))


def _state_of(fields: dict[bytes, bytes]) -> AssessmentState:
    try:
        return AssessmentState(
            meta=_meta_dec.decode(fields[b"meta"]),
            cheap=_cheap_dec.decode(fields[b"part:cheap"]) if b"part:cheap" in fields else None,
            llm=_llm_dec.decode(fields[b"part:llm"]) if b"part:llm" in fields else None,
            final=_final_dec.decode(fields[b"final"]) if b"final" in fields else None,
            started=b"started" in fields,
            failed=fields[b"failed"].decode() if b"failed" in fields else None,
            callback=_cb_dec.decode(fields[b"callback"]) if b"callback" in fields else None,
            tail_done=fields.get(b"tail") == b"done",
            tail_error=fields[b"tail_error"].decode() if b"tail_error" in fields else None,
            provisional=_final_dec.decode(fields[b"provisional"]) if b"provisional" in fields else None,
            cheap_callback=_cb_dec.decode(fields[b"callback:cheap"]) if b"callback:cheap" in fields else None,
        )
    except msgspec.ValidationError as exc:
        # written by an older version of the service: report it as unreadable rather than answering 500
        raise NotFound(f"assessment stored in an older format that this version cannot read ({exc})") from exc
