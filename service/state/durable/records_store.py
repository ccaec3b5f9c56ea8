"""The records of work in the durable store (assessments, Idempotency-Keys, batches, the score pool, judge jobs): each
part written once by a conditional UPDATE (``... WHERE part IS NULL``), the tail and the callbacks' states marked in
the row, the whole of one submission (its Idempotency-Key, its assessments, its batch) in one transaction.

Methods block on database I/O (``service.state.store.Store`` calls them from a thread); rows hold packed records
(``packing``), decoded by the caller. The score pool is a histogram: counts of unforced scores per tenant, model
version and bucket ``round(score / SCORE_BUCKET)``, so it stays bounded however many assessments a tenant makes; a
score ranks against the buckets at or below its own (a difference below SCORE_BUCKET in the risk score's z units).
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Connection, Row

from service.platform.errors import TooManyRequests
from service.state.durable.engine import lock
from service.state.durable.review_items import delete_items_of
from service.state.durable.schema import assessments, batches, idempotency_keys, judge_jobs, score_pool
from service.state.durable.store import DurableStore

__all__ = ["SCORE_BUCKET", "Forgotten", "IdempotencyClaim", "Quotas", "RecordStore", "bucket_of"]

SCORE_BUCKET = 0.001
CALLBACK_COLUMNS = {"final": ("callback", "callback_status"), "cheap": ("callback_cheap", "callback_cheap_status")}
PARTS = ("cheap", "provisional", "llm", "final")
_A = assessments.c


def bucket_of(score: float) -> int:
    return round(score / SCORE_BUCKET)


@dataclass(frozen=True)
class IdempotencyClaim:
    """The assessment an Idempotency-Key names, with the hash of the request that claimed it."""

    assessment_id: str
    request_sha: str


@dataclass(frozen=True)
class Quotas:
    """Per-tenant quotas (0 = none): assessments stored, candidates of unfinished assessments."""

    stored_assessments: int = 0
    queued_candidates: int = 0


@dataclass
class Forgotten:
    """What a purge or a deletion removed: assessment ids per tenant (the review queue forgets their items)."""

    assessments: dict[str, list[str]]
    batches: int = 0
    judge_jobs: int = 0

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.assessments.values())


def _upsert(con: Connection, table: sa.Table) -> Any:
    if con.dialect.name == "postgresql":
        from sqlalchemy.dialects.postgresql import insert as pg_insert

        return pg_insert(table)
    from sqlalchemy.dialects.sqlite import insert as sqlite_insert

    return sqlite_insert(table)


def _todo() -> Any:
    """1 while the assessment has work left (no final state) or a callback still to deliver (a failed assessment
    sends none)."""
    work_left = sa.and_(_A.failed.is_(None), _A.tail_done_at.is_(None), _A.tail_error.is_(None))
    callback = sa.or_(_A.callback_status == "pending", _A.callback_cheap_status == "pending")
    pending = sa.or_(work_left, sa.and_(_A.failed.is_(None), callback))
    return sa.case((pending, 1), else_=0)


def _check_quotas(con: Connection, rows: Sequence[dict[str, Any]], quotas: Quotas) -> None:
    """Raise TooManyRequests, naming the quota, when these rows would take the tenant past one. Counted under the
    tenant's lock (PostgreSQL; SQLite's write transaction excludes every other writer): two submissions at once
    cannot both pass on the same count."""
    tenant = rows[0]["tenant"]
    lock(con, f"quota:{tenant}")
    if quotas.stored_assessments:
        used = int(con.execute(sa.select(sa.func.count()).where(_A.tenant == tenant)).scalar_one())
        if used + len(rows) > quotas.stored_assessments:
            raise _over("TRISK_MAX_STORED_ASSESSMENTS", quotas.stored_assessments, used, len(rows), 3600)
    if quotas.queued_candidates:
        queued = sa.select(sa.func.coalesce(sa.func.sum(_A.candidates), 0)).where(
            _A.tenant == tenant, _A.todo == 1, _A.final.is_(None), _A.failed.is_(None)
        )
        used = int(con.execute(queued).scalar_one())
        asked = sum(int(r["candidates"]) for r in rows)
        if used + asked > quotas.queued_candidates:
            raise _over("TRISK_MAX_QUEUED_CANDIDATES", quotas.queued_candidates, used, asked, 30)


def _over(quota: str, limit: int, used: int, asked: int, retry_after: float) -> TooManyRequests:
    what = "assessments stored" if quota == "TRISK_MAX_STORED_ASSESSMENTS" else "candidates queued (unfinished)"
    advice = (
        "delete some (DELETE /v1/assessments/{id}) or wait for retention to remove them"
        if quota == "TRISK_MAX_STORED_ASSESSMENTS"
        else "retry when some have finished"
    )
    return TooManyRequests(
        f"quota {quota}: the tenant has {used} {what}, this request adds {asked}, the limit is {limit}; {advice}",
        retry_after=retry_after,
        extra={"quota": quota, "limit": limit, "used": used, "requested": asked},
    )


class RecordStore:
    """The records on the durable store's engine."""

    def __init__(self, db: DurableStore) -> None:
        self.db = db

    # -- writes of the API
    def create(
        self,
        rows: Sequence[dict[str, Any]],
        batch: dict[str, Any] | None = None,
        claim: tuple[str, str, str, str] | None = None,
        quotas: Quotas | None = None,
    ) -> IdempotencyClaim | None:
        """Insert assessments (``rows``: column values, one tenant's) and the batch in one transaction; with ``claim``
        (tenant, key, assessment id, request sha) the Idempotency-Key first: when it is taken, nothing is written and
        its claim is returned. ``quotas`` are checked in the same transaction (TooManyRequests past one)."""
        now = time.time()
        with self.db._insert() as con:
            if claim is not None:
                tenant, key, aid, sha = claim
                ins = _upsert(con, idempotency_keys).values(
                    tenant=tenant, key=key, assessment_id=aid, request_sha=sha, created_at=now
                )
                con.execute(ins.on_conflict_do_nothing())
                # whose claim stands is read back, not taken from a rowcount (PostgreSQL reports none with RETURNING)
                c = idempotency_keys.c
                prior = con.execute(
                    sa.select(c.assessment_id, c.request_sha).where(c.tenant == tenant, c.key == key)
                ).one()
                if prior.assessment_id != aid:
                    return IdempotencyClaim(prior.assessment_id, prior.request_sha)
            if rows and quotas is not None:
                _check_quotas(con, rows, quotas)
            if rows:
                con.execute(assessments.insert(), [{"todo": 1, **r} for r in rows])
            if batch is not None:
                con.execute(batches.insert().values(**batch))
        return None

    def release_idempotency(self, tenant: str, key: str) -> None:
        c = idempotency_keys.c
        with self.db._insert() as con:
            con.execute(idempotency_keys.delete().where(c.tenant == tenant, c.key == key))

    def delete(self, tenant: str, aids: Sequence[str], batch_id: str | None = None) -> list[str]:
        """Remove these assessments (and the batch) of one tenant, with their Idempotency-Keys; the ids removed."""
        with self.db._insert() as con:
            gone = self._delete_assessments(con, tenant, list(aids))
            if batch_id is not None:
                con.execute(batches.delete().where(batches.c.tenant == tenant, batches.c.id == batch_id))
        return gone

    @staticmethod
    def _delete_assessments(con: Connection, tenant: str, aids: list[str]) -> list[str]:
        gone: list[str] = []
        for i in range(0, len(aids), 500):
            chunk = aids[i : i + 500]
            found = con.execute(sa.select(_A.id).where(_A.tenant == tenant, _A.id.in_(chunk))).scalars().all()
            if found:
                con.execute(assessments.delete().where(_A.tenant == tenant, _A.id.in_(found)))
                c = idempotency_keys.c
                con.execute(idempotency_keys.delete().where(c.tenant == tenant, c.assessment_id.in_(found)))
                delete_items_of(con, tenant, list(found))  # review items live and die with their assessment
                gone += found
        return gone

    # -- reads
    def get(self, tenant: str, aid: str) -> Row[Any] | None:
        with self.db._read() as con:
            return con.execute(sa.select(assessments).where(_A.tenant == tenant, _A.id == aid)).first()

    def get_many(self, tenant: str, aids: Sequence[str]) -> dict[str, Row[Any]]:
        out: dict[str, Row[Any]] = {}
        with self.db._read() as con:
            for i in range(0, len(aids), 500):
                query = sa.select(assessments).where(_A.tenant == tenant, _A.id.in_(list(aids[i : i + 500])))
                out.update((r.id, r) for r in con.execute(query))
        return out

    def exists(self, tenant: str, aid: str) -> bool:
        with self.db._read() as con:
            return con.execute(sa.select(_A.id).where(_A.tenant == tenant, _A.id == aid)).first() is not None

    def get_batch(self, tenant: str, bid: str) -> bytes | None:
        c = batches.c
        with self.db._read() as con:
            meta: bytes | None = con.execute(sa.select(c.meta).where(c.tenant == tenant, c.id == bid)).scalar()
        return meta

    def count_stored(self, tenant: str) -> int:
        with self.db._read() as con:
            return int(con.execute(sa.select(sa.func.count()).where(_A.tenant == tenant)).scalar_one())

    def count_unfinished(self, tenant: str) -> int:
        """The tenant's assessments with work left (candidates are counted by the caller from what it reads)."""
        with self.db._read() as con:
            query = sa.select(sa.func.count()).where(_A.tenant == tenant, _A.todo == 1, _A.final.is_(None))
            return int(con.execute(query).scalar_one())

    # -- writes of the workers
    def _update(self, tenant: str, aid: str, values: dict[str, Any], *conds: Any, retodo: bool = False) -> bool:
        with self.db._insert() as con:
            stmt = assessments.update().where(_A.tenant == tenant, _A.id == aid, *conds).values(**values)
            written = con.execute(stmt).rowcount == 1
            if written and retodo:
                con.execute(assessments.update().where(_A.tenant == tenant, _A.id == aid).values(todo=_todo()))
        return written

    def put_once(self, tenant: str, aid: str, part: str, blob: bytes) -> bool:
        """Write a part (cheap, provisional, llm, final) unless it is there: False when another delivery wrote it."""
        assert part in PARTS
        column = assessments.c[part]
        return self._update(tenant, aid, {part: blob}, column.is_(None))

    def mark_started(self, tenant: str, aid: str) -> None:
        self._update(tenant, aid, {"started_at": time.time()}, _A.started_at.is_(None))

    def llm_started_at(self, tenant: str, aid: str) -> float:
        with self.db._insert() as con:
            where = (_A.tenant == tenant, _A.id == aid)
            con.execute(
                assessments.update().where(*where, _A.llm_started_at.is_(None)).values(llm_started_at=time.time())
            )
            first = con.execute(sa.select(_A.llm_started_at).where(*where)).scalar()
        return float(first) if first is not None else time.time()

    def mark(self, tenant: str, aid: str, **values: Any) -> None:
        """Set end states (failed, tail_done_at, tail_error) and recompute whether work is left."""
        self._update(tenant, aid, values, retodo=True)

    def put_callback(self, tenant: str, aid: str, event: str, blob: bytes, status: str) -> bool:
        """A callback's state; a delivered one is never replaced (a redelivered job finds it delivered)."""
        column, status_column = CALLBACK_COLUMNS[event]
        sc = assessments.c[status_column]
        not_delivered = sa.or_(sc.is_(None), sc != "delivered")
        return self._update(tenant, aid, {column: blob, status_column: status}, not_delivered, retodo=True)

    def open_callback(self, tenant: str, aid: str, event: str, blob: bytes) -> None:
        column, status_column = CALLBACK_COLUMNS[event]
        values = {column: blob, status_column: "pending"}
        self._update(tenant, aid, values, assessments.c[column].is_(None), retodo=True)

    # -- the score pool
    def record_scores(self, tenant: str, aid: str, by_rule: dict[str, list[float]]) -> bool:
        """Add an assessment's unforced scores to the tenant's pool, once (the row's ``pooled_at`` is set in the same
        transaction): False when they were added before (a re-run tail)."""
        now = time.time()
        with self.db._insert() as con:
            claimed = con.execute(
                assessments.update()
                .where(_A.tenant == tenant, _A.id == aid, _A.pooled_at.is_(None))
                .values(pooled_at=now)
            ).rowcount
            if claimed != 1:
                return False
            counts: dict[tuple[str, int], int] = {}
            for rule, scores in by_rule.items():
                for s in scores:
                    counts[(rule, bucket_of(s))] = counts.get((rule, bucket_of(s)), 0) + 1
            for (rule, bucket), n in sorted(counts.items()):
                ins = _upsert(con, score_pool).values(tenant=tenant, rule=rule, bucket=bucket, n=n, updated_at=now)
                con.execute(
                    ins.on_conflict_do_update(
                        index_elements=["tenant", "rule", "bucket"],
                        set_={"n": score_pool.c.n + ins.excluded.n, "updated_at": now},
                    )
                )
        return True

    def seen_counts(self, tenant: str, rule: str, scores: Sequence[float]) -> tuple[int, list[int]]:
        c = score_pool.c
        sums = [sa.func.coalesce(sa.func.sum(sa.case((c.bucket <= bucket_of(s), c.n), else_=0)), 0) for s in scores]
        query = sa.select(sa.func.coalesce(sa.func.sum(c.n), 0), *sums).where(c.tenant == tenant, c.rule == rule)
        with self.db._read() as con:
            row = con.execute(query).one()
        return int(row[0]), [int(v) for v in row[1:]]

    # -- the reconciler, the purge, the export
    def unfinished(self, older_than: float, after: tuple[float, str, str] | None, limit: int) -> list[Row[Any]]:
        """Assessments with work or a callback left, created before ``older_than``, in (created_at, tenant, id)
        order after the key ``after`` (pages of ``limit``)."""
        cols = (_A.tenant, _A.id, _A.created_at, _A.meta, _A.cheap, _A.final, _A.failed, _A.tail_done_at)
        extra = (_A.tail_error, _A.callback_status, _A.callback_cheap_status)
        query = sa.select(*cols, *extra).where(_A.todo == 1, _A.created_at < older_than)
        if after is not None:
            query = query.where(sa.tuple_(_A.created_at, _A.tenant, _A.id) > sa.tuple_(*after))
        with self.db._read() as con:
            return list(con.execute(query.order_by(_A.created_at, _A.tenant, _A.id).limit(limit)))

    def unfinished_judge_jobs(self, older_than: float, limit: int) -> list[Row[Any]]:
        c = judge_jobs.c
        query = sa.select(c.tenant, c.kind, c.id).where(c.todo == 1, c.created_at < older_than)
        with self.db._read() as con:
            return list(con.execute(query.order_by(c.created_at).limit(limit)))

    def purge(self, before: float, chunk: int = 500) -> Forgotten:
        """Delete every record created before ``before``, ``chunk`` rows per transaction (an index range each: never
        one long DELETE that holds locks while the API writes)."""
        out = Forgotten({})
        while True:
            with self.db._insert() as con:
                keys = con.execute(
                    sa.select(_A.tenant, _A.id).where(_A.created_at < before).order_by(_A.created_at).limit(chunk)
                ).all()
                by_tenant: dict[str, list[str]] = {}
                for k in keys:
                    by_tenant.setdefault(k.tenant, []).append(k.id)
                for tenant, aids in by_tenant.items():
                    out.assessments.setdefault(tenant, []).extend(self._delete_assessments(con, tenant, aids))
            if len(keys) < chunk:
                break
        for table, counter in ((batches, "batches"), (judge_jobs, "judge_jobs"), (idempotency_keys, None)):
            out_n = self._purge_table(table, table.c.created_at, before, chunk)
            if counter:
                setattr(out, counter, out_n)
        self._purge_table(score_pool, score_pool.c.updated_at, before, chunk)
        return out

    def _purge_table(self, table: sa.Table, when: Any, before: float, chunk: int) -> int:
        pk = list(table.primary_key.columns)
        n = 0
        while True:
            with self.db._insert() as con:
                keys = con.execute(sa.select(*pk).where(when < before).limit(chunk)).all()
                if keys:
                    con.execute(table.delete().where(sa.tuple_(*pk).in_([tuple(k) for k in keys])))
            n += len(keys)
            if len(keys) < chunk:
                return n

    def export(self, tenant: str, since: float, until: float, page: int = 200) -> Iterator[Row[Any]]:
        """A tenant's assessments created in [since, until), oldest first, read a page per transaction."""
        after: tuple[float, str] | None = None
        while True:
            query = sa.select(assessments).where(_A.tenant == tenant, _A.created_at >= since, _A.created_at < until)
            if after is not None:
                query = query.where(sa.tuple_(_A.created_at, _A.id) > sa.tuple_(*after))
            with self.db._read() as con:
                rows = list(con.execute(query.order_by(_A.created_at, _A.id).limit(page)))
            yield from rows
            if len(rows) < page:
                return
            after = (rows[-1].created_at, rows[-1].id)

    # -- judge jobs
    def create_judge_job(self, values: dict[str, Any]) -> None:
        with self.db._insert() as con:
            con.execute(judge_jobs.insert().values(todo=0 if values.get("result") else 1, **values))

    def get_judge_job(self, tenant: str, kind: str, jid: str) -> Row[Any] | None:
        c = judge_jobs.c
        with self.db._read() as con:
            return con.execute(sa.select(judge_jobs).where(c.tenant == tenant, c.kind == kind, c.id == jid)).first()

    def update_judge_job(self, tenant: str, kind: str, jid: str, values: dict[str, Any], *conds: Any) -> bool:
        c = judge_jobs.c
        with self.db._insert() as con:
            stmt = judge_jobs.update().where(c.tenant == tenant, c.kind == kind, c.id == jid, *conds).values(**values)
            return con.execute(stmt).rowcount == 1

    def delete_batch_row(self, tenant: str, bid: str) -> bool:
        with self.db._insert() as con:
            stmt = batches.delete().where(batches.c.tenant == tenant, batches.c.id == bid)
            return con.execute(stmt).rowcount == 1
