"""``trisk migrate-redis``: copy the records a release before the durable records kept in Redis (assessments with
their parts, Idempotency-Keys, batches, the score pool, companion judge jobs) into the durable store.

Idempotent and resumable: a record already in the store is kept, only the parts it lacks are filled in (a part that
Redis got later, while the old release still ran, arrives on the next run); each score pool is imported once per
tenant and model version (a claim row in ``idempotency_keys``, in the transaction that adds the counts) and the
assessments it names are marked pooled, so their tails never add them again. Run it again until it copies nothing.

The old layout (every key under ``trisk:t:{tenant}:``): ``a:{id}`` hash (meta, part:cheap, provisional, part:llm,
final, started, llm_started, failed, tail, tail_error, callback, callback:cheap), ``idem:{key}`` string
(``{"id", "sha"}``), ``b:{id}`` hash (meta), ``seen:{rule}`` sorted set (``{assessment}:{candidate}`` -> score),
``jj:{kind}:{id}`` hash (meta, plan, result, started, failed).
"""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import msgspec
import sqlalchemy as sa

from service.state.durable.packing import pack
from service.state.durable.records_store import _todo, _upsert, bucket_of
from service.state.durable.schema import assessments, batches, idempotency_keys, judge_jobs, score_pool
from service.state.durable.store import DurableStore

__all__ = ["POOL_CLAIM", "migrate_redis"]

POOL_CLAIM = "trisk migrate-redis: score pool {rule}"
_PACKED = {"part:cheap": "cheap", "provisional": "provisional", "part:llm": "llm", "final": "final"}
_CALLBACKS = {
    "callback": ("callback", "callback_status"),
    "callback:cheap": ("callback_cheap", "callback_cheap_status"),
}


def _tenant_of(key: str, marker: str) -> str:
    return key[len("trisk:t:") :].rpartition(marker)[0]


def _assessment_values(fields: dict[bytes, bytes]) -> dict[str, Any]:
    meta = msgspec.json.decode(fields[b"meta"])
    values: dict[str, Any] = {"meta": pack(meta)}
    for name, column in _PACKED.items():
        if name.encode() in fields:
            values[column] = pack(msgspec.json.decode(fields[name.encode()]))
    for name, (column, status) in _CALLBACKS.items():
        if name.encode() in fields:
            state = msgspec.json.decode(fields[name.encode()])
            values[column], values[status] = pack(state), state.get("status", "pending")
    now = time.time()
    if b"started" in fields:
        values["started_at"] = now
    if b"llm_started" in fields:
        values["llm_started_at"] = float(fields[b"llm_started"])
    if b"failed" in fields:
        values["failed"] = fields[b"failed"].decode()
    if fields.get(b"tail") == b"done":
        values["tail_done_at"] = now
    if b"tail_error" in fields:
        values["tail_error"] = fields[b"tail_error"].decode()
    return values


def _copy_row(con: Any, table: sa.Table, keys: dict[str, Any], values: dict[str, Any], fresh: dict[str, Any]) -> str:
    """Insert the row unless it is there, else fill in the columns it lacks: "new", "filled" or "" (nothing)."""
    where = [table.c[k] == v for k, v in keys.items()]
    before = con.execute(sa.select(*[table.c[c] for c in values]).where(*where)).first()
    if before is None:
        con.execute(_upsert(con, table).values(**keys, **fresh, **values).on_conflict_do_nothing())
        return "new"
    missing = {c: v for c, v in values.items() if getattr(before, c) is None}
    if missing:
        con.execute(table.update().where(*where).values(**missing))
        return "filled"
    return ""


def _count(copied: Counter[str], kind: str, outcome: str) -> None:
    if outcome:
        copied[kind if outcome == "new" else f"{kind} filled in"] += 1


def migrate_redis(
    redis: Any, db: DurableStore, *, tenant: str = "*", count: int = 500, seen: dict[str, list[str]] | None = None
) -> Counter[str]:
    """Copy everything of ``tenant`` (``*``: every tenant; ``redis``: a synchronous client); what was copied, by
    kind. Safe to run again. ``seen`` collects every assessment found (tenant -> ids), copied now or before, so the
    caller can rebuild what depends on them (the review queue)."""
    if tenant != "*" and any(ch in tenant for ch in "*?[]\\"):
        raise ValueError(f"a tenant name, not a pattern: {tenant!r}")
    copied: Counter[str] = Counter()
    for key in redis.scan_iter(match=f"trisk:t:{tenant}:a:*", count=count):
        fields = redis.hgetall(key)
        if b"meta" not in fields:
            continue
        meta = msgspec.json.decode(fields[b"meta"])
        ids = {"tenant": meta["tenant"], "id": meta["id"]}
        if seen is not None:
            seen.setdefault(ids["tenant"], []).append(ids["id"])
        fresh = {
            "created_at": float(meta["created_at"]),
            "batch_id": meta.get("batch_id"),
            "todo": 1,
            "candidates": len(meta["request"]["candidates"]),
        }
        with db._insert() as con:
            _count(copied, "assessments", _copy_row(con, assessments, ids, _assessment_values(fields), fresh))
            con.execute(
                assessments.update()
                .where(assessments.c.tenant == ids["tenant"], assessments.c.id == ids["id"])
                .values(todo=_todo())
            )
    for key in redis.scan_iter(match=f"trisk:t:{tenant}:idem:*", count=count):
        raw = redis.get(key)
        if raw is None:
            continue
        name = key.decode()
        claim = msgspec.json.decode(raw)
        tenant, idem = _tenant_of(name, ":idem:"), name.rpartition(":idem:")[2]
        with db._insert() as con:
            named = {"assessment_id": claim["id"], "request_sha": claim["sha"]}
            outcome = _copy_row(
                con, idempotency_keys, {"tenant": tenant, "key": idem}, named, {"created_at": time.time()}
            )
            _count(copied, "idempotency keys", outcome)
    for key in redis.scan_iter(match=f"trisk:t:{tenant}:b:*", count=count):
        raw = redis.hget(key, "meta")
        if raw is None:
            continue
        batch = msgspec.json.decode(raw)
        with db._insert() as con:
            ids = {"tenant": batch["tenant"], "id": batch["id"]}
            outcome = _copy_row(con, batches, ids, {"meta": pack(batch)}, {"created_at": float(batch["created_at"])})
            _count(copied, "batches", outcome)
    for key in redis.scan_iter(match=f"trisk:t:{tenant}:seen:*", count=count):
        name = key.decode()
        tenant, rule = _tenant_of(name, ":seen:"), name.rpartition(":seen:")[2]
        members = redis.zrange(key, 0, -1, withscores=True)
        if pooled := _import_pool(db, tenant, rule, members):
            copied["pooled scores"] += pooled
    for key in redis.scan_iter(match=f"trisk:t:{tenant}:jj:*", count=count):
        fields = redis.hgetall(key)
        if b"meta" not in fields or b"plan" not in fields:
            continue
        meta = msgspec.json.decode(fields[b"meta"])
        values: dict[str, Any] = {"plan": pack(msgspec.json.decode(fields[b"plan"]))}
        if b"result" in fields:
            values["result"] = pack(msgspec.json.decode(fields[b"result"]))
        if b"started" in fields:
            values["started_at"] = time.time()
        if b"failed" in fields:
            values["failed"] = fields[b"failed"].decode()
        ids = {"tenant": meta["tenant"], "kind": meta["kind"], "id": meta["id"]}
        with db._insert() as con:
            fresh = {"created_at": float(meta["created_at"]), "todo": 1}
            _count(copied, "judge jobs", _copy_row(con, judge_jobs, ids, values, fresh))
            done = sa.or_(judge_jobs.c.result.is_not(None), judge_jobs.c.failed.is_not(None))
            con.execute(judge_jobs.update().where(*[judge_jobs.c[k] == v for k, v in ids.items()], done).values(todo=0))
    return copied


def _import_pool(db: DurableStore, tenant: str, rule: str, members: list[tuple[bytes, float]]) -> int:
    """One tenant's pool of one model version, once: the claim row and the counts in one transaction."""
    now, token = time.time(), uuid.uuid4().hex
    with db._insert() as con:
        name = POOL_CLAIM.format(rule=rule)
        claim = _upsert(con, idempotency_keys).values(
            tenant=tenant, key=name, assessment_id="", request_sha=token, created_at=now
        )
        con.execute(claim.on_conflict_do_nothing())
        c = idempotency_keys.c
        taken = con.execute(sa.select(c.request_sha).where(c.tenant == tenant, c.key == name)).scalar_one()
        if taken != token:
            return 0  # imported by an earlier run
        counts = Counter(bucket_of(score) for _, score in members)
        for bucket, n in sorted(counts.items()):
            ins = _upsert(con, score_pool).values(tenant=tenant, rule=rule, bucket=bucket, n=n, updated_at=now)
            con.execute(
                ins.on_conflict_do_update(
                    index_elements=["tenant", "rule", "bucket"],
                    set_={"n": score_pool.c.n + ins.excluded.n, "updated_at": now},
                )
            )
        aids = sorted({m.decode().rpartition(":")[0] for m, _ in members})
        for i in range(0, len(aids), 500):
            con.execute(
                assessments.update()
                .where(
                    assessments.c.tenant == tenant,
                    assessments.c.id.in_(aids[i : i + 500]),
                    assessments.c.pooled_at.is_(None),
                )
                .values(pooled_at=now)
            )
    return len(members)
