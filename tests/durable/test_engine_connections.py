"""How the engines' connections behave: PostgreSQL connections idle for a while are checked before use, so a restarted
server or a failover does not fail the next request, while connections in steady use are not pinged (a round trip per
request); a SQLite writer waiting for another one's lock tries again every few milliseconds, not at SQLite's own
1, 2, 5 ... 100 ms pauses."""

from __future__ import annotations

import sqlite3
import threading
from pathlib import Path

import pytest
import sqlalchemy as sa

from service.state.durable import engine as durable_engine
from service.state.durable import make_engine
from service.state.durable.engine import write_transaction
from tests.durable_support import PostgresServer


def _kill_backends(admin: sa.Engine, database: str) -> None:
    """What a server restart does to every pooled connection."""
    with admin.connect() as con:
        con.execute(
            sa.text(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :d AND pid <> pg_backend_pid()"
            ),
            {"d": database},
        )


def _pid(engine: sa.Engine) -> int:
    with engine.connect() as con:
        return int(con.execute(sa.text("SELECT pg_backend_pid()")).scalar_one())


def test_an_idle_connection_is_pinged_and_replaced_when_the_server_dropped_it(
    pg: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pg.fresh_database() as url:
        engine = make_engine(url)
        try:
            first = _pid(engine)
            _kill_backends(pg.admin, str(url.database))
            monkeypatch.setattr(durable_engine, "PING_IDLE_SECONDS", 0.0)  # idle long enough: pinged
            assert _pid(engine) != first  # the dead connection was replaced before the query, which succeeded
        finally:
            engine.dispose()


def test_a_connection_in_steady_use_is_not_pinged(pg: PostgresServer, monkeypatch: pytest.MonkeyPatch) -> None:
    with pg.fresh_database() as url:
        engine = make_engine(url)
        try:
            _pid(engine)
            monkeypatch.setattr(durable_engine, "PING_IDLE_SECONDS", 3600.0)  # just used: no ping
            pings: list[object] = []
            monkeypatch.setattr(engine.dialect, "do_ping", lambda con: pings.append(con) or True)
            _pid(engine)
            assert pings == []
            _kill_backends(pg.admin, str(url.database))
            with pytest.raises(sa.exc.OperationalError):  # the price: a restart within the second fails once
                _pid(engine)
            _pid(engine)  # and the pool replaced its connections
        finally:
            engine.dispose()


def _sqlite(tmp_path: Path) -> sa.Engine:
    engine = make_engine(sa.URL.create("sqlite", database=str(tmp_path / "trisk.db")))
    with write_transaction(engine) as con:
        con.exec_driver_sql("CREATE TABLE t (x INTEGER)")
    return engine


def test_a_sqlite_writer_retries_the_lock_every_few_milliseconds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = _sqlite(tmp_path)
    holder = sqlite3.connect(tmp_path / "trisk.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another writer (the worker) holds the lock
    pauses: list[float] = []
    released = threading.Event()

    def pause(seconds: float) -> None:
        pauses.append(seconds)
        if len(pauses) == 20:  # the other writer commits while this one waits
            holder.execute("COMMIT")
            released.set()

    monkeypatch.setattr(durable_engine.time, "sleep", pause)
    try:
        with write_transaction(engine) as con:
            con.exec_driver_sql("INSERT INTO t VALUES (1)")
            timeout = con.exec_driver_sql("PRAGMA busy_timeout").scalar_one()
        assert released.is_set() and len(pauses) == 20  # it waited, then took the lock at the next try
        assert max(pauses) <= 0.002  # never SQLite's own pauses of up to 100 ms
        assert timeout == 30_000  # the busy timeout is back for the statements of the transaction
    finally:
        holder.close()
        engine.dispose()


def test_a_sqlite_writer_gives_up_after_the_wait_as_the_busy_timeout_did(tmp_path: Path) -> None:
    engine = _sqlite(tmp_path)
    holder = sqlite3.connect(tmp_path / "trisk.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        raw = sqlite3.connect(tmp_path / "trisk.db", isolation_level=None)
        with pytest.raises(sa.exc.OperationalError, match="locked"):  # the store answers it with a 503
            durable_engine.begin_immediate(raw, wait=0.05)
        assert raw.execute("PRAGMA busy_timeout").fetchone()[0] == 30_000
        raw.close()
    finally:
        holder.close()
        engine.dispose()
