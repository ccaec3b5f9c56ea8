"""The durable store (SQLite, WAL): append-only human verdicts, panel adjudications, fits, fitted risk models and
their activations.

Redis on this machine keeps nothing on disk, and verdicts are the only ground truth the service will ever see, so
they live here, each row with its tenant and a snapshot of the item's signals and risk (a calibration report
survives the assessment's expiry in Redis). Fitted risk models live here too (not as files on the host that fitted
them), so every worker scores with the same model. Verdict, adjudication, model and activation rows are never
updated or deleted (triggers refuse it): a second verdict on an item is a second opinion, the active model is the
latest activation.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import msgspec

__all__ = ["LABELS", "Activation", "Adjudication", "FitRecord", "Label", "ReviewDB", "Verdict", "open_db"]

Label = Literal["VALID", "MINOR", "MAJOR"]
LABELS: tuple[Label, ...] = ("VALID", "MINOR", "MAJOR")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    item_id TEXT NOT NULL,
    assessment_id TEXT NOT NULL,
    candidate_id TEXT NOT NULL,
    reviewer TEXT NOT NULL,
    label TEXT NOT NULL CHECK (label IN ('VALID', 'MINOR', 'MAJOR')),
    error_category TEXT,
    note TEXT,
    lease_id TEXT,
    created_at REAL NOT NULL,
    snapshot TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS verdicts_item ON verdicts (tenant, item_id);
CREATE TRIGGER IF NOT EXISTS verdicts_no_update BEFORE UPDATE ON verdicts
BEGIN SELECT RAISE(ABORT, 'verdicts are append-only'); END;
CREATE TRIGGER IF NOT EXISTS verdicts_no_delete BEFORE DELETE ON verdicts
BEGIN SELECT RAISE(ABORT, 'verdicts are append-only'); END;

CREATE TABLE IF NOT EXISTS adjudications (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    item_id TEXT,
    status TEXT NOT NULL,
    label TEXT,
    created_at REAL NOT NULL,
    body TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS adjudications_tenant ON adjudications (tenant, item_id);
CREATE TRIGGER IF NOT EXISTS adjudications_no_update BEFORE UPDATE ON adjudications
BEGIN SELECT RAISE(ABORT, 'adjudications are append-only'); END;
CREATE TRIGGER IF NOT EXISTS adjudications_no_delete BEFORE DELETE ON adjudications
BEGIN SELECT RAISE(ABORT, 'adjudications are append-only'); END;

CREATE TABLE IF NOT EXISTS fits (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    model_name TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL
);

CREATE TABLE IF NOT EXISTS risk_models (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    name TEXT NOT NULL,
    rule TEXT NOT NULL,
    created_at REAL NOT NULL,
    body TEXT NOT NULL,
    UNIQUE (tenant, name)
);
CREATE TRIGGER IF NOT EXISTS risk_models_no_update BEFORE UPDATE ON risk_models
BEGIN SELECT RAISE(ABORT, 'risk models are append-only'); END;
CREATE TRIGGER IF NOT EXISTS risk_models_no_delete BEFORE DELETE ON risk_models
BEGIN SELECT RAISE(ABORT, 'risk models are append-only'); END;

CREATE TABLE IF NOT EXISTS model_activations (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    model_name TEXT NOT NULL,
    rule TEXT NOT NULL,
    activated_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS activations_tenant ON model_activations (tenant, id);
CREATE TRIGGER IF NOT EXISTS activations_no_update BEFORE UPDATE ON model_activations
BEGIN SELECT RAISE(ABORT, 'activations are append-only'); END;
"""


class Verdict(msgspec.Struct):
    """One reviewer's verdict on one item; ``opinion`` is 1 for the first verdict on the item, 2 for the next..."""

    id: int
    tenant: str
    item_id: str
    assessment_id: str
    candidate_id: str
    reviewer: str
    label: Label
    error_category: str | None
    note: str | None
    lease_id: str | None
    created_at: float
    snapshot: dict[str, Any]
    opinion: int = 1


class Adjudication(msgspec.Struct):
    """A reference-aided panel label (calibration only, never mixed with human verdicts)."""

    id: str
    tenant: str
    created_at: float
    status: Literal["pending", "done", "skipped", "inconclusive"]
    label: Label | None
    reason: str | None
    source: str
    candidate: str
    reference: str
    source_lang: str
    candidate_model: str | None
    item_id: str | None
    panel: str | None
    panel_version: str | None
    prompt_version: str
    prompt_hash: str
    judges: list[dict[str, Any]]
    votes: dict[str, int]
    snapshot: dict[str, Any] | None = None


class FitRecord(msgspec.Struct):
    id: str
    tenant: str
    model_name: str
    created_at: float
    body: dict[str, Any]


class Activation(msgspec.Struct):
    tenant: str
    model_name: str
    rule: str
    activated_at: float


_enc = msgspec.json.Encoder()
_adj_dec = msgspec.json.Decoder(Adjudication)


class ReviewDB:
    """Typed access to the SQLite label store; one short connection per operation (safe from any thread)."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as con:
            # WAL: readers never block the writer; synchronous=FULL: a committed verdict survives a power cut
            con.execute("PRAGMA journal_mode=WAL")
            con.executescript(_SCHEMA)

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        con = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        try:
            con.execute("PRAGMA synchronous=FULL")
            con.execute("PRAGMA busy_timeout=30000")
            yield con
        finally:
            con.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._connect() as con:
            con.execute("BEGIN IMMEDIATE")
            try:
                yield con
            except BaseException:
                con.execute("ROLLBACK")
                raise
            con.execute("COMMIT")

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
    ) -> Verdict:
        now = time.time()
        with self._write() as con:
            cur = con.execute(
                "INSERT INTO verdicts (tenant, item_id, assessment_id, candidate_id, reviewer, label, error_category,"
                " note, lease_id, created_at, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    tenant,
                    item_id,
                    assessment_id,
                    candidate_id,
                    reviewer,
                    label,
                    error_category,
                    note,
                    lease_id,
                    now,
                    _enc.encode(snapshot).decode(),
                ),
            )
            vid = int(cur.lastrowid or 0)
            (opinion,) = con.execute(
                "SELECT COUNT(*) FROM verdicts WHERE tenant = ? AND item_id = ? AND id <= ?", (tenant, item_id, vid)
            ).fetchone()
        return Verdict(
            vid,
            tenant,
            item_id,
            assessment_id,
            candidate_id,
            reviewer,
            label,
            error_category,
            note,
            lease_id,
            now,
            snapshot,
            int(opinion),
        )

    def verdicts(self, tenant: str, item_id: str | None = None) -> list[Verdict]:
        """Every verdict of a tenant (or of one item), oldest first, numbered per item."""
        sql = (
            "SELECT id, tenant, item_id, assessment_id, candidate_id, reviewer, label, error_category, note,"
            " lease_id, created_at, snapshot FROM verdicts WHERE tenant = ?"
        )
        args: tuple[Any, ...] = (tenant,)
        if item_id is not None:
            sql += " AND item_id = ?"
            args += (item_id,)
        with self._connect() as con:
            rows = con.execute(sql + " ORDER BY id", args).fetchall()
        seen: dict[str, int] = {}
        out = []
        for r in rows:
            seen[r[2]] = seen.get(r[2], 0) + 1
            out.append(
                Verdict(
                    r[0],
                    r[1],
                    r[2],
                    r[3],
                    r[4],
                    r[5],
                    r[6],
                    r[7],
                    r[8],
                    r[9],
                    r[10],
                    snapshot=msgspec.json.decode(r[11]),
                    opinion=seen[r[2]],
                )
            )
        return out

    # -- adjudications
    def add_adjudication(self, adj: Adjudication) -> Adjudication:
        with self._write() as con:
            con.execute(
                "INSERT INTO adjudications (id, tenant, item_id, status, label, created_at, body)"
                " VALUES (?, ?, ?, ?, ?, ?, ?)",
                (adj.id, adj.tenant, adj.item_id, adj.status, adj.label, adj.created_at, _enc.encode(adj).decode()),
            )
        return adj

    def adjudications(self, tenant: str, item_id: str | None = None) -> list[Adjudication]:
        sql = "SELECT body FROM adjudications WHERE tenant = ?"
        args: tuple[Any, ...] = (tenant,)
        if item_id is not None:
            sql += " AND item_id = ?"
            args += (item_id,)
        with self._connect() as con:
            rows = con.execute(sql + " ORDER BY created_at, id", args).fetchall()
        return [_adj_dec.decode(r[0]) for r in rows]

    def adjudication(self, tenant: str, adj_id: str) -> Adjudication | None:
        with self._connect() as con:
            row = con.execute("SELECT body FROM adjudications WHERE tenant = ? AND id = ?", (tenant, adj_id)).fetchone()
        return None if row is None else _adj_dec.decode(row[0])

    # -- fits and active models
    def add_fit(self, rec: FitRecord) -> None:
        with self._write() as con:
            con.execute(
                "INSERT INTO fits (id, tenant, model_name, created_at, body) VALUES (?, ?, ?, ?, ?)",
                (rec.id, rec.tenant, rec.model_name, rec.created_at, _enc.encode(rec.body).decode()),
            )

    def fits(self, tenant: str) -> list[FitRecord]:
        with self._connect() as con:
            rows = con.execute(
                "SELECT id, tenant, model_name, created_at, body FROM fits WHERE tenant = ? ORDER BY created_at",
                (tenant,),
            ).fetchall()
        return [FitRecord(r[0], r[1], r[2], r[3], msgspec.json.decode(r[4])) for r in rows]

    def add_model(self, tenant: str, name_for: Any) -> tuple[str, str]:
        """Store a fitted model under the next free name ``name_for(n)`` for n = 1, 2, ... of this tenant and return
        (name, body). ``name_for(n)`` returns (name, rule, JSON body); the UNIQUE constraint settles races."""
        while True:
            with self._connect() as con:
                (count,) = con.execute("SELECT COUNT(*) FROM risk_models WHERE tenant = ?", (tenant,)).fetchone()
            name, rule, body = name_for(int(count) + 1)
            try:
                with self._write() as con:
                    con.execute(
                        "INSERT INTO risk_models (tenant, name, rule, created_at, body) VALUES (?, ?, ?, ?, ?)",
                        (tenant, name, rule, time.time(), body),
                    )
            except sqlite3.IntegrityError:
                continue  # another fit took this name first
            return name, body

    def models(self, tenant: str) -> list[tuple[str, str]]:
        """(name, JSON body) of every model fitted for a tenant, oldest first."""
        with self._connect() as con:
            rows = con.execute("SELECT name, body FROM risk_models WHERE tenant = ? ORDER BY id", (tenant,)).fetchall()
        return [(r[0], r[1]) for r in rows]

    def models_version(self, tenant: str) -> int:
        """Changes whenever a model is added for the tenant (the id of its latest row; 0 for none)."""
        with self._connect() as con:
            (latest,) = con.execute("SELECT MAX(id) FROM risk_models WHERE tenant = ?", (tenant,)).fetchone()
        return int(latest or 0)

    def activate(self, tenant: str, model_name: str, rule: str) -> Activation:
        now = time.time()
        with self._write() as con:
            con.execute(
                "INSERT INTO model_activations (tenant, model_name, rule, activated_at) VALUES (?, ?, ?, ?)",
                (tenant, model_name, rule, now),
            )
        return Activation(tenant, model_name, rule, now)

    def active(self, tenant: str) -> Activation | None:
        with self._connect() as con:
            row = con.execute(
                "SELECT tenant, model_name, rule, activated_at FROM model_activations WHERE tenant = ?"
                " ORDER BY id DESC LIMIT 1",
                (tenant,),
            ).fetchone()
        return None if row is None else Activation(*row)


_dbs: dict[str, ReviewDB] = {}
_lock = threading.Lock()


def open_db(path: str | Path) -> ReviewDB:
    """The process's ReviewDB for a path (schema created once)."""
    key = str(path)
    with _lock:
        db = _dbs.get(key)
        if db is None:
            db = _dbs[key] = ReviewDB(key)
        return db
