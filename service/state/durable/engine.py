"""Where the durable store lives and how to talk to it: the SQLite file at ``TRISK_DB_PATH`` (one machine) or the
PostgreSQL database that ``TRISK_DATABASE_URL`` names (psycopg 3). Everything that differs between the two engines
is here and in ``append_only``: URLs, connection settings, write transactions, locks, duplicate-key errors."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import ArgumentError, IntegrityError

from service.platform.settings import DurableSettings, SettingError

__all__ = [
    "database_url",
    "describe",
    "is_duplicate_key",
    "lock",
    "make_engine",
    "ping",
    "unflushed_commit",
    "write_transaction",
]

_WRITE = "trisk_durable_write"  # execution option: this connection's transaction will write
_POSTGRES_SCHEMES = {"postgresql", "postgres", "postgresql+psycopg"}
# seconds a writer waits for another one: SQLite's busy timeout and PostgreSQL's connect timeout
_WAIT_SECONDS = 30
_BUSY_TIMEOUT = f"PRAGMA busy_timeout={_WAIT_SECONDS * 1000}"  # what a connection waits for a lock
# milliseconds unacknowledged data may wait before the connection is given up (tests/deploy/test_rehearsal.py)
_TCP_USER_TIMEOUT_MS = 15_000
# a pooled PostgreSQL connection idle this long is pinged before use; one used more recently is not: a ping on every
# checkout was a round trip and an eighth of the API's CPU on each GET (bench/bench_store_scale.py --profile)
PING_IDLE_SECONDS = 1.0
_IDLE_SINCE = "trisk_idle_since"  # connection record info: when it went back to the pool


def database_url(settings: DurableSettings) -> sa.URL:
    """PostgreSQL when ``TRISK_DATABASE_URL`` is set, else the SQLite file at ``TRISK_DB_PATH`` (one way for each)."""
    raw = settings.database_url.strip()
    if not raw:
        return sa.URL.create("sqlite", database=str(Path(settings.db_path)))
    try:
        url = sa.make_url(raw)
    except ArgumentError:
        raise SettingError("TRISK_DATABASE_URL: not a database URL (postgresql://user:password@host:5432/db)") from None
    if url.drivername not in _POSTGRES_SCHEMES:
        # the password stays out of the message: only the scheme is shown
        raise SettingError(
            f"TRISK_DATABASE_URL: {url.drivername}:// is not supported; name a PostgreSQL database "
            "(postgresql://...) or leave it unset for the SQLite file at TRISK_DB_PATH"
        )
    return url.set(drivername="postgresql+psycopg")


def describe(url: sa.URL) -> str:
    """The URL for logs and messages, without its password."""
    if url.get_backend_name() == "sqlite":
        return f"sqlite file {url.database}"
    where = f"{url.host or 'localhost'}:{url.port or 5432}/{url.database or ''}"
    return f"postgresql at {where}" + (f" as {url.username}" if url.username else "")


def private_file(path: Path) -> None:
    """The database file readable by its owner only (it holds key digests and callback secrets): created 0600 when new
    (SQLite gives its -wal and -shm files the database's mode), made 0600 when it, or they, are wider."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600))
    for part in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        with contextlib.suppress(FileNotFoundError):
            if part.stat().st_mode & 0o077:
                part.chmod(0o600)


def make_engine(url: sa.URL) -> Engine:
    """An engine with the store's connection rules: on SQLite WAL, synchronous=FULL and a busy timeout; on PostgreSQL
    connections idle for ``PING_IDLE_SECONDS`` checked before use (a restarted server or a failover does not fail the
    next request; a connection used within that second is not checked: a restart in that second fails the requests
    on it once, with a 503, and every connection the pool held before is replaced)."""
    if url.get_backend_name() == "sqlite":
        if url.database:
            Path(url.database).parent.mkdir(parents=True, exist_ok=True)
            private_file(Path(url.database))
        engine = sa.create_engine(url, connect_args={"timeout": _WAIT_SECONDS})
        event.listen(engine, "connect", _sqlite_connect)
        event.listen(engine, "begin", _sqlite_begin)
        return engine
    connect_args: dict[str, Any] = {
        "connect_timeout": _WAIT_SECONDS,
        "application_name": "trisk",
        # a database cut off mid-request (a partition, a failed-over host that vanished) fails the request within
        # TCP_USER_TIMEOUT instead of hanging for the kernel's retransmission timeout (about 15 minutes); keepalives
        # find a dead pooled connection while it is idle
        "tcp_user_timeout": _TCP_USER_TIMEOUT_MS,
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 5,
        "keepalives_count": 3,
    }
    for key in connect_args.copy():
        if key in url.query:  # what the URL says wins
            del connect_args[key]
    engine = sa.create_engine(url, pool_size=5, max_overflow=10, connect_args=connect_args)
    event.listen(engine, "checkout", _ping_when_idle)
    event.listen(engine, "checkin", _went_idle)
    return engine


def _went_idle(_dbapi_con: Any, record: Any) -> None:
    if record is not None:
        record.info[_IDLE_SINCE] = time.monotonic()


def _ping_when_idle(dbapi_con: Any, record: Any, proxy: Any) -> None:
    """SQLAlchemy's pre-ping, for a connection idle since ``PING_IDLE_SECONDS`` only (a new one needs none): a dead
    one replaces every connection of the pool, as pre-ping does."""
    since = record.info.get(_IDLE_SINCE)
    if since is None or time.monotonic() - since < PING_IDLE_SECONDS:
        return
    dialect = proxy._pool._dialect
    try:
        dialect.do_ping(dbapi_con)
    except dialect.loaded_dbapi.Error as exc:
        raise sa.exc.InvalidatePoolError(f"the idle connection failed its ping: {exc}") from exc


def _sqlite_connect(dbapi_con: Any, _record: Any) -> None:
    # the driver's own transaction handling would open transactions late and never BEGIN IMMEDIATE: SQLAlchemy's
    # "begin" event below emits BEGIN itself
    dbapi_con.isolation_level = None
    cur = dbapi_con.cursor()
    cur.execute(_BUSY_TIMEOUT)
    # WAL: readers never block the writer; synchronous=FULL: a committed verdict survives a power cut
    cur.execute("PRAGMA journal_mode=WAL")
    cur.execute("PRAGMA synchronous=FULL")
    cur.close()


def _sqlite_begin(con: Connection) -> None:
    # a writer takes the write lock at BEGIN: what it reads before writing (the next opinion number, the next model
    # name, the schema version) cannot change under it, and a busy database is waited for instead of failing mid-way
    if con.get_execution_options().get(_WRITE):
        begin_immediate(con.connection.dbapi_connection)
    else:
        con.exec_driver_sql("BEGIN")


# pauses between tries of BEGIN IMMEDIATE while another connection writes: SQLite's own busy handler sleeps 1, 2, 5,
# 10, 15, 20, 25 ... 100 ms between tries, so a lock freed just after a try is taken up to that much later (the tail
# of POST /v1/assessments behind the worker's writes, bench/bench_assessments.py --profile)
BEGIN_PAUSE_SECONDS = 0.0005
BEGIN_MAX_PAUSE_SECONDS = 0.002


def begin_immediate(raw: Any, wait: float = _WAIT_SECONDS) -> None:
    """BEGIN IMMEDIATE on a sqlite3 connection, tried again every few milliseconds for up to ``wait`` seconds while the
    database is locked (the connection's busy timeout is off meanwhile and set back after); then the lock error as an
    OperationalError, as the busy timeout raised it."""
    raw.execute("PRAGMA busy_timeout=0")
    try:
        deadline = time.monotonic() + wait
        pause = BEGIN_PAUSE_SECONDS
        while True:
            try:
                raw.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if getattr(exc, "sqlite_errorname", "") != "SQLITE_BUSY" or time.monotonic() >= deadline:
                    raise sa.exc.OperationalError("BEGIN IMMEDIATE", None, exc) from exc
            time.sleep(pause)
            pause = min(2 * pause, BEGIN_MAX_PAUSE_SECONDS)
    finally:
        raw.execute(_BUSY_TIMEOUT)


@contextmanager
def write_transaction(engine: Engine) -> Iterator[Connection]:
    """A transaction that writes: committed at the end, rolled back on any exception."""
    with engine.connect() as con:
        con = con.execution_options(**{_WRITE: True})
        with con.begin():
            yield con


def unflushed_commit(con: Connection) -> None:
    """This write transaction's commit returns before its WAL reaches the disk (PostgreSQL ``synchronous_commit``
    off for it alone): for writes a crash may lose without harm, whose wait for the flush would be most of their
    time. A crash loses at most the last few hundred milliseconds of such commits, never a partial one, and a later
    flushed commit flushes them too. SQLite: nothing (its synchronous setting is the connection's)."""
    if con.dialect.name == "postgresql":
        con.exec_driver_sql("SET LOCAL synchronous_commit TO OFF")


def lock(con: Connection, key: str) -> None:
    """Hold ``key`` until this write transaction ends. PostgreSQL: a transaction-scoped advisory lock (writers of
    other keys go on); SQLite: nothing to do, the write transaction already excludes every other writer."""
    if con.dialect.name == "postgresql":
        con.execute(sa.select(sa.func.pg_advisory_xact_lock(sa.func.hashtextextended(key, 0))))


def is_duplicate_key(exc: IntegrityError) -> bool:
    """Whether an insert failed because its primary key or a unique constraint is taken (not for other reasons)."""
    orig = exc.orig
    if getattr(orig, "sqlstate", None) == "23505":  # PostgreSQL unique_violation
        return True
    return getattr(orig, "sqlite_errorname", None) in ("SQLITE_CONSTRAINT_PRIMARYKEY", "SQLITE_CONSTRAINT_UNIQUE")


# errors that say the database refuses writes for a while, not that one statement was wrong or had to wait: SQLite's
# result codes (a full disk or max_page_count, a read-only file, an I/O error) and PostgreSQL's SQLSTATE classes
# (53: insufficient resources, disk full among them; 58: system errors such as I/O; 25006: a read-only transaction,
# what a replica or a primary in recovery answers). A lock timeout ("database is locked") is contention, not this
_SQLITE_REFUSALS = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_IOERR")
_POSTGRES_REFUSALS = ("53", "58", "25006")


def refuses_writes(exc: BaseException | None) -> bool:
    """Whether a DBAPI error says the database refuses writes (full, read-only, failing I/O)."""
    name = getattr(exc, "sqlite_errorname", None)
    if isinstance(name, str):
        return name.startswith(_SQLITE_REFUSALS)
    state = getattr(exc, "sqlstate", None)
    return isinstance(state, str) and state.startswith(_POSTGRES_REFUSALS)


def watch_write_refusals(engine: Engine, seen: Callable[[str], None]) -> None:
    """Call ``seen(reason)`` whenever a statement or a commit on ``engine`` fails because the database refuses
    writes (readiness says so: service/app/health). The reason is the driver's first line, which names no
    credentials (a connection failure is not a refusal and never gets here)."""

    def handle_error(context: sa.engine.ExceptionContext) -> None:
        orig = context.original_exception
        if refuses_writes(orig):
            text = str(orig).strip()
            seen(text.splitlines()[0] if text else type(orig).__name__)

    event.listen(engine, "handle_error", handle_error)


def ping(engine: Engine) -> None:
    """One round trip to the database (readiness): raises when it does not answer."""
    with engine.connect() as con:
        con.execute(sa.text("SELECT 1"))
