"""Schema migrations of the durable store (Alembic scripts in ``migrations/versions``): ``upgrade`` brings a database
to the latest revision, however many processes call it at once, and ``revision`` writes the next script.

Concurrent upgrades (two API pods' init containers, the API and a worker starting together) are serialised inside
one transaction that reads the schema version and migrates: PostgreSQL takes an advisory lock in it; on SQLite it is
a BEGIN IMMEDIATE transaction, which holds the database's write lock. Whoever comes second finds the schema at the
head and does nothing. DDL is transactional on both engines, so a failed migration leaves the previous schema.
"""

from __future__ import annotations

import logging
import tempfile
import threading
from pathlib import Path

import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from service.core.durable.engine import describe, lock, make_engine, write_transaction

__all__ = ["MIGRATIONS", "VERSION_TABLE", "current", "head", "revision", "upgrade"]

logger = logging.getLogger("trisk.durable")

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
# a name of its own, so a database shared with another Alembic project keeps both histories apart
VERSION_TABLE = "trisk_schema_version"
_LOCK_KEY = "trisk durable store: schema migration"
# Alembic's `context` and `op` are module globals: two migrations in one process must not run at once
_in_process = threading.Lock()


def _config(con: Connection | None = None) -> Config:
    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS))
    cfg.set_main_option("file_template", "%%(rev)s_%%(slug)s")
    cfg.attributes["connection"] = con
    return cfg


def head() -> str:
    """The latest revision of the scripts."""
    rev = ScriptDirectory.from_config(_config()).get_current_head()
    assert rev is not None, f"no migrations in {MIGRATIONS}"
    return rev


def current(con: Connection) -> str | None:
    """The revision the database is at (None: never migrated)."""
    return MigrationContext.configure(con, opts={"version_table": VERSION_TABLE}).get_current_revision()


def upgrade(engine: Engine) -> tuple[str | None, str]:
    """Migrate to the head revision; returns the revisions before and after. Idempotent and safe to run at once."""
    target = head()
    with _in_process, write_transaction(engine) as con:
        lock(con, _LOCK_KEY)
        before = current(con)
        if before != target:
            logger.info("durable store %s: migrating from %s to %s", describe(engine.url), before, target)
            command.upgrade(_config(con), target)
        after = current(con)
    assert after == target, f"the durable store is at {after} after upgrading to {target}"
    return before, after


def revision(message: str) -> Path:
    """Write the next migration script: the difference between ``schema.py`` and a database at the head revision
    (compared on a throwaway SQLite file); check it, and add ``append_only.refuse_changes`` for append-only tables."""
    scripts = ScriptDirectory.from_config(_config())
    next_id = "%04d" % (max(int(s.revision) for s in scripts.walk_revisions()) + 1)
    with tempfile.TemporaryDirectory() as folder:
        engine = make_engine(sa.URL.create("sqlite", database=str(Path(folder) / "head.db")))
        try:
            upgrade(engine)
            with engine.connect() as con:
                script = command.revision(_config(con), message=message, autogenerate=True, rev_id=next_id)
        finally:
            engine.dispose()
    assert script is not None and not isinstance(script, list)
    return Path(script.path)
