"""The durable store's engines for tests: PostgreSQL databases made and dropped on the local server, SQLite files,
and the tally of which engines the tests actually ran on (printed at the end of the run by tests/conftest.py)."""

from __future__ import annotations

import os
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa

from service.platform.settings import DurableSettings
from service.state.durable import DurableStore, database_url, make_engine, upgrade

ENGINES = ("sqlite", "postgresql")
# the server's maintenance database, reached as a role that may create databases (trust auth on this machine)
ADMIN_URL = sa.make_url(
    os.environ.get("TRISK_TEST_POSTGRES_URL") or "postgresql://postgres@127.0.0.1:5432/postgres"
).set(drivername="postgresql+psycopg")
START_HINT = (
    "start it with `pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start` "
    "(scripts/postgres.sh does that; .ci/run and scripts/test.sh call it)"
)
# the engines each test used, set by the fixtures before they connect (so a failed connection is counted too)
ENGINES_USED = pytest.StashKey[set[str]]()
# (engine, outcome) -> number of tests, filled by tests/conftest.py's report hook
TALLY: Counter[tuple[str, str]] = Counter()


def uses_engine(request: pytest.FixtureRequest, engine: str) -> None:
    request.node.stash.setdefault(ENGINES_USED, set()).add(engine)


def sqlite_settings(folder: Path) -> DurableSettings:
    return DurableSettings(db_path=str(folder / "trisk.db"), database_url="")


def pg_settings(url: sa.URL) -> DurableSettings:
    return DurableSettings(db_path="", database_url=url.render_as_string(hide_password=False))


class PostgresServer:
    """The local PostgreSQL server: databases of this test session, created on demand and dropped at the end."""

    def __init__(self, admin_url: sa.URL) -> None:
        self.admin = sa.create_engine(admin_url, isolation_level="AUTOCOMMIT", connect_args={"connect_timeout": 5})
        self.made: list[str] = []

    def check(self) -> None:
        problem = None
        try:
            with self.admin.connect() as con:
                con.execute(sa.text("SELECT 1"))
        except sa.exc.OperationalError as exc:
            problem = str(exc.orig).strip().replace("\n", " ")
        if problem is not None:  # outside the except block: the message alone, not a chain of tracebacks
            where = f"{self.admin.url.host}:{self.admin.url.port}"
            pytest.fail(f"PostgreSQL is not answering at {where} ({problem}): {START_HINT}", pytrace=False)

    def create_database(self) -> sa.URL:
        name = f"trisk_test_{uuid.uuid4().hex[:12]}"
        with self.admin.connect() as con:
            con.exec_driver_sql(f'CREATE DATABASE "{name}"')
        self.made.append(name)
        return self.admin.url.set(database=name)

    def drop_database(self, url: sa.URL) -> None:
        with self.admin.connect() as con:
            con.exec_driver_sql(f'DROP DATABASE IF EXISTS "{url.database}" WITH (FORCE)')
        self.made.remove(str(url.database))

    @contextmanager
    def fresh_database(self) -> Iterator[sa.URL]:
        url = self.create_database()
        try:
            yield url
        finally:
            self.drop_database(url)

    def close(self) -> None:
        for name in list(self.made):
            self.drop_database(self.admin.url.set(database=name))
        self.admin.dispose()


@contextmanager
def migrated_store(settings: DurableSettings) -> Iterator[DurableStore]:
    """A store of its own (not the process cache of ``open_store``), migrated to the head, closed afterwards."""
    engine = make_engine(database_url(settings))
    try:
        upgrade(engine)
        yield DurableStore(engine)
    finally:
        engine.dispose()


def tally_line() -> str | None:
    """``durable store tests ran on: sqlite (40 passed), postgresql (40 passed)``; None when none ran."""
    parts = []
    for engine in ENGINES:
        counts = {outcome: n for (e, outcome), n in sorted(TALLY.items()) if e == engine}
        if counts:
            parts.append(f"{engine} ({', '.join(f'{n} {outcome}' for outcome, n in counts.items())})")
    return f"durable store tests ran on: {', '.join(parts)}" if parts else None


def review_item_ids(settings: DurableSettings, tenant: str, assessment_id: str | None = None) -> list[str]:
    """The ids of a tenant's review items in the store (of one assessment), sorted: what worker tests count."""
    from service.state.durable.schema import review_items

    c = review_items.c
    query = sa.select(c.id).where(c.tenant == tenant)
    if assessment_id is not None:
        query = query.where(c.assessment_id == assessment_id)
    engine = make_engine(database_url(settings))
    try:
        with engine.connect() as con:
            return sorted(con.execute(query).scalars())
    finally:
        engine.dispose()
