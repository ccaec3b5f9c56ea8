"""Typed access to the durable store, the same on SQLite and PostgreSQL: append verdicts, adjudications, fits, fitted
risk models and activations, and read them back. Methods block on database I/O: call them from a thread when on an
event loop; they are safe from any thread (the engine's pool hands each call a connection of its own)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import msgspec
import sqlalchemy as sa
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import IntegrityError, OperationalError

from service.core.typology import ErrorSpan, FindingJudgement
from service.platform.errors import Conflict, Unavailable
from service.platform.settings import DurableSettings
from service.state.durable import migrate
from service.state.durable.engine import (
    database_url,
    describe,
    is_duplicate_key,
    lock,
    make_engine,
    watch_write_refusals,
    write_transaction,
)
from service.state.durable.records import Activation, Adjudication, FitRecord, Label, Verdict
from service.state.durable.schema import adjudications, fits, model_activations, risk_models, verdicts

__all__ = [
    "DuplicateRecord",
    "DurableStore",
    "StoreUnavailable",
    "close_stores",
    "insert_verdict",
    "open_store",
    "read_verdicts",
]

_enc = msgspec.json.Encoder()
_judgements = msgspec.json.Decoder(tuple[FindingJudgement, ...])
_spans = msgspec.json.Decoder(tuple[ErrorSpan, ...])
_adj_dec = msgspec.json.Decoder(Adjudication)
# a fit that keeps losing the race for a name this often is not racing: something else is wrong
_MAX_NAME_TRIES = 100


class DuplicateRecord(Conflict):
    """A record with this key is stored already (append-only: it is never replaced)."""


class StoreUnavailable(Unavailable):
    """The database does not answer (down, failing over, or an SQLite file locked past the busy timeout): a 503 that
    a client may retry, not a 500. Nothing was written."""


def insert_verdict(con: Connection, v: Verdict, request_key: str | None = None) -> Verdict:
    """Append ``v`` in the caller's write transaction; returns it with its id and opinion number (``v.id`` and
    ``v.opinion`` are ignored). The one insert of a verdict: ``DurableStore.add_verdict`` and the review queue's
    verdict (which checks the item's lease in the same transaction) both go through it."""
    # verdicts on one item are numbered in id order: one writer per item at a time, so that the id a verdict gets and
    # the earlier verdicts it counts agree (on PostgreSQL, rows of transactions still open are not counted, and their
    # ids may be lower)
    lock(con, f"verdicts:{v.tenant}:{v.item_id}")
    result = con.execute(
        verdicts.insert().values(
            tenant=v.tenant,
            item_id=v.item_id,
            assessment_id=v.assessment_id,
            candidate_id=v.candidate_id,
            reviewer=v.reviewer,
            label=v.label,
            error_category=v.error_category,
            note=v.note,
            lease_id=v.lease_id,
            created_at=v.created_at,
            snapshot=_enc.encode(v.snapshot).decode(),
            request_key=request_key,
            findings=_enc.encode(v.findings).decode() if v.findings else None,
            spans=_enc.encode(v.spans).decode() if v.spans else None,
            supersedes=v.supersedes,
            lease_seconds=v.lease_seconds,
            active_seconds=v.active_seconds,
        )
    )
    key = result.inserted_primary_key
    assert key is not None
    vid = int(key[0])
    opinion = con.execute(
        sa.select(sa.func.count())
        .select_from(verdicts)
        .where(verdicts.c.tenant == v.tenant, verdicts.c.item_id == v.item_id, verdicts.c.id <= vid)
    ).scalar_one()
    return msgspec.structs.replace(v, id=vid, opinion=int(opinion))


def read_verdicts(con: Connection, tenant: str, item_id: str | None = None) -> list[tuple[Verdict, str | None]]:
    """Every verdict of a tenant (or of one item), oldest first, numbered per item, each with its request key."""
    c = verdicts.c
    query = sa.select(
        c.id,
        c.tenant,
        c.item_id,
        c.assessment_id,
        c.candidate_id,
        c.reviewer,
        c.label,
        c.error_category,
        c.note,
        c.lease_id,
        c.created_at,
        c.snapshot,
        c.request_key,
        c.findings,
        c.spans,
        c.supersedes,
        c.lease_seconds,
        c.active_seconds,
    ).where(c.tenant == tenant)
    if item_id is not None:
        query = query.where(c.item_id == item_id)
    seen: dict[str, int] = {}
    out = []
    for r in con.execute(query.order_by(c.id)).all():
        seen[r.item_id] = seen.get(r.item_id, 0) + 1
        verdict = Verdict(
            int(r.id),
            r.tenant,
            r.item_id,
            r.assessment_id,
            r.candidate_id,
            r.reviewer,
            r.label,
            r.error_category,
            r.note,
            r.lease_id,
            float(r.created_at),
            snapshot=msgspec.json.decode(r.snapshot),
            opinion=seen[r.item_id],
            # empty in verdicts an earlier release stored
            findings=_judgements.decode(r.findings) if r.findings else (),
            spans=_spans.decode(r.spans) if r.spans else (),
            supersedes=None if r.supersedes is None else int(r.supersedes),
            lease_seconds=None if r.lease_seconds is None else float(r.lease_seconds),
            active_seconds=None if r.active_seconds is None else float(r.active_seconds),
        )
        out.append((verdict, r.request_key))
    return out


class DurableStore:
    """The store on one engine; the schema must be at the head revision (``open_store`` migrates first)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # reads on PostgreSQL run in autocommit: under READ COMMITTED a transaction gives a read nothing (each
        # statement takes its own snapshot either way) and costs two round trips more (BEGIN, and the ROLLBACK the
        # pool issues when the connection comes back), a third of a GET's time in the database
        # (bench/bench_store_scale.py); SQLite's reads keep its BEGIN (``engine._sqlite_begin``)
        postgres = engine.dialect.name == "postgresql"
        self._reader = engine.execution_options(isolation_level="AUTOCOMMIT") if postgres else engine
        # SQLite takes one writer at a time: submissions wait for it on one thread of their own (Store.create), not
        # on threads of the shared pool, which novelty and reads need meanwhile (at 100 POSTs/s beside a worker all
        # six of them sat waiting for the write lock and the API fell behind: bench/bench_assessments.py --profile)
        self.submissions = None if postgres else ThreadPoolExecutor(1, thread_name_prefix="trisk-sqlite-submissions")
        # (monotonic time, reason) of the last write the database refused (a full disk, a read-only file or replica):
        # every submission is a 503 then, and readiness must say so rather than "store ok"
        self.write_refused: tuple[float, str] | None = None
        watch_write_refusals(engine, self._write_refused)

    def _write_refused(self, reason: str) -> None:
        self.write_refused = (time.monotonic(), reason)

    @property
    def dialect(self) -> str:
        """``sqlite`` or ``postgresql``."""
        return self.engine.dialect.name

    def __repr__(self) -> str:
        return f"DurableStore({describe(self.engine.url)})"

    @contextmanager
    def _read(self) -> Iterator[Connection]:
        try:
            with self._reader.connect() as con:
                yield con
        except OperationalError as exc:
            raise self._unavailable(exc) from exc

    @contextmanager
    def _insert(self) -> Iterator[Connection]:
        """A write transaction whose duplicate keys surface as DuplicateRecord."""
        try:
            with write_transaction(self.engine) as con:
                yield con
        except IntegrityError as exc:
            if is_duplicate_key(exc):
                raise DuplicateRecord(str(exc.orig)) from exc
            raise
        except OperationalError as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: OperationalError) -> StoreUnavailable:
        first_line = str(exc.orig).strip().splitlines()[0] if str(exc.orig).strip() else type(exc.orig).__name__
        return StoreUnavailable(f"the durable store ({describe(self.engine.url)}) is unavailable: {first_line}")

    # -- verdicts
    def add_verdict(
        self,
        *,
        tenant: str,
        item_id: str,
        assessment_id: str,
        candidate_id: str,
        reviewer: str,
        label: Label,
        error_category: str | None,
        note: str | None,
        lease_id: str | None,
        snapshot: dict[str, Any],
        findings: tuple[FindingJudgement, ...] = (),
        spans: tuple[ErrorSpan, ...] = (),
    ) -> Verdict:
        with self._insert() as con:
            return insert_verdict(
                con,
                Verdict(
                    0,
                    tenant,
                    item_id,
                    assessment_id,
                    candidate_id,
                    reviewer,
                    label,
                    error_category,
                    note,
                    lease_id,
                    time.time(),
                    snapshot,
                    findings=findings,
                    spans=spans,
                ),
            )

    def verdicts_given(self, tenant: str, reviewer: str, since: float) -> int:
        """How many verdicts ``reviewer`` gave since ``since`` (a reviewer's day, on the workbench)."""
        c = verdicts.c
        query = sa.select(sa.func.count()).where(c.tenant == tenant, c.reviewer == reviewer, c.created_at >= since)
        with self._read() as con:
            return int(con.execute(query).scalar_one())

    def verdicts(self, tenant: str, item_id: str | None = None) -> list[Verdict]:
        """Every verdict of a tenant (or of one item), oldest first, numbered per item."""
        with self._read() as con:
            return [v for v, _ in read_verdicts(con, tenant, item_id)]

    # -- adjudications
    def add_adjudication(self, adj: Adjudication) -> Adjudication:
        """Append a panel record; DuplicateRecord if one with its id is stored already."""
        with self._insert() as con:
            con.execute(
                adjudications.insert().values(
                    id=adj.id,
                    tenant=adj.tenant,
                    item_id=adj.item_id,
                    status=adj.status,
                    label=adj.label,
                    created_at=adj.created_at,
                    body=_enc.encode(adj).decode(),
                )
            )
        return adj

    def adjudications(self, tenant: str, item_id: str | None = None) -> list[Adjudication]:
        c = adjudications.c
        query = sa.select(c.body).where(c.tenant == tenant)
        if item_id is not None:
            query = query.where(c.item_id == item_id)
        with self._read() as con:
            bodies = con.execute(query.order_by(c.created_at, c.id)).scalars().all()
        return [_adj_dec.decode(b) for b in bodies]

    def adjudication(self, tenant: str, adj_id: str) -> Adjudication | None:
        c = adjudications.c
        with self._read() as con:
            body = con.execute(sa.select(c.body).where(c.tenant == tenant, c.id == adj_id)).scalar_one_or_none()
        return None if body is None else _adj_dec.decode(body)

    # -- fits and active models
    def add_fit(self, rec: FitRecord) -> None:
        with self._insert() as con:
            con.execute(
                fits.insert().values(
                    id=rec.id,
                    tenant=rec.tenant,
                    model_name=rec.model_name,
                    created_at=rec.created_at,
                    body=_enc.encode(rec.body).decode(),
                )
            )

    def fits(self, tenant: str) -> list[FitRecord]:
        c = fits.c
        query = sa.select(c.id, c.tenant, c.model_name, c.created_at, c.body).where(c.tenant == tenant)
        with self._read() as con:
            rows = con.execute(query.order_by(c.created_at, c.id)).all()
        return [FitRecord(r.id, r.tenant, r.model_name, float(r.created_at), msgspec.json.decode(r.body)) for r in rows]

    def add_model(self, tenant: str, name_for: Callable[[int], tuple[str, str, str]]) -> tuple[str, str]:
        """Store a fitted model under the next free name ``name_for(n)`` for n = 1, 2, ... of this tenant and return
        (name, body). ``name_for(n)`` returns (name, rule, JSON body); the UNIQUE constraint settles races: the loser
        of a race for a name counts again and takes the next one."""
        for _ in range(_MAX_NAME_TRIES):
            name, rule, body = name_for(self._count_models(tenant) + 1)
            try:
                with self._insert() as con:
                    con.execute(
                        risk_models.insert().values(
                            tenant=tenant, name=name, rule=rule, created_at=time.time(), body=body
                        )
                    )
            except DuplicateRecord:
                continue  # another fit took this name first
            return name, body
        raise Conflict(f"no free fitted-model name for tenant {tenant!r} after {_MAX_NAME_TRIES} tries")

    def _count_models(self, tenant: str) -> int:
        with self._read() as con:
            n = con.execute(
                sa.select(sa.func.count()).select_from(risk_models).where(risk_models.c.tenant == tenant)
            ).scalar_one()
        return int(n)

    def models(self, tenant: str) -> list[tuple[str, str]]:
        """(name, JSON body) of every model fitted for a tenant, oldest first."""
        c = risk_models.c
        with self._read() as con:
            rows = con.execute(sa.select(c.name, c.body).where(c.tenant == tenant).order_by(c.id)).all()
        return [(r.name, r.body) for r in rows]

    def models_version(self, tenant: str) -> int:
        """Changes whenever a model is added for the tenant: their number (rows are never deleted). Not the latest id:
        on PostgreSQL a lower id can commit after a higher one."""
        return self._count_models(tenant)

    def activate(
        self,
        tenant: str,
        model_name: str,
        rule: str,
        *,
        activated_by: str | None = None,
        forced: bool = False,
        reason: str | None = None,
        body: dict[str, Any] | None = None,
    ) -> Activation:
        act = Activation(tenant, model_name, rule, time.time(), activated_by, forced, reason, body or {})
        with self._insert() as con:
            con.execute(
                model_activations.insert().values(
                    tenant=tenant,
                    model_name=model_name,
                    rule=rule,
                    activated_at=act.activated_at,
                    activated_by=activated_by,
                    forced=forced,
                    reason=reason,
                    body=_enc.encode(act.body).decode(),
                )
            )
        return act

    def _activations(self, tenant: str, latest: bool) -> list[Activation]:
        c = model_activations.c
        query = sa.select(c.tenant, c.model_name, c.rule, c.activated_at, c.activated_by, c.forced, c.reason, c.body)
        query = query.where(c.tenant == tenant).order_by(c.id.desc() if latest else c.id)
        if latest:
            query = query.limit(1)
        with self._read() as con:
            rows = con.execute(query).all()
        # rows of releases before 0009 read as not forced, without a reason or a comparison
        return [
            Activation(
                r.tenant,
                r.model_name,
                r.rule,
                float(r.activated_at),
                r.activated_by,
                bool(r.forced),
                r.reason,
                msgspec.json.decode(r.body) if r.body else {},
            )
            for r in rows
        ]

    def activations(self, tenant: str) -> list[Activation]:
        """Every activation of a tenant, oldest first (the last one is the active model)."""
        return self._activations(tenant, latest=False)

    def active(self, tenant: str) -> Activation | None:
        rows = self._activations(tenant, latest=True)
        return rows[0] if rows else None


_stores: dict[str, DurableStore] = {}
_lock = threading.Lock()


def open_store(settings: DurableSettings) -> DurableStore:
    """The process's store for these settings, its schema migrated to the head revision on first use."""
    url = database_url(settings)
    key = url.render_as_string(hide_password=False)
    with _lock:
        store = _stores.get(key)
        if store is None:
            engine = make_engine(url)
            try:
                migrate.upgrade(engine)
            except BaseException:
                engine.dispose()
                raise
            store = _stores[key] = DurableStore(engine)
        return store


def close_stores() -> None:
    """Close every store this process opened (their connections too)."""
    with _lock:
        for store in _stores.values():
            store.engine.dispose()
        _stores.clear()
