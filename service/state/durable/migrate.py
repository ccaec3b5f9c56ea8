"""Schema migrations of the durable store (Alembic scripts in ``migrations/versions``): ``upgrade`` brings a database
to the latest revision, however many processes call it at once, and ``revision`` writes the next script.

Concurrent upgrades (two API pods' init containers, the API and a worker starting together) are serialised inside
one transaction that reads the schema version and migrates: PostgreSQL takes an advisory lock in it; on SQLite it is
a BEGIN IMMEDIATE transaction, which holds the database's write lock. Whoever comes second finds the schema at the
head and does nothing. DDL is transactional on both engines, so a failed migration leaves the previous schema.

Rolling back is running the previous release on the newer schema, so every release must tolerate a database migrated
beyond what it knows. Migrations *expand* (new tables; new columns nullable or with a server default; new indexes):
the code of every earlier release keeps working on the result, and ``tests/durable/test_rollback.py`` checks each
script for it on both engines. A *contract* migration (dropping or renaming what older code uses, tightening a
column) declares ``oldest_reader = "<revision>"`` in its script: the oldest revision whose code works on the schema
after it. Each upgrade appends the resulting floor to ``schema_compat``; a release that finds the database at a
revision it does not know reads the latest floor and runs when its own head is at or above it (``SchemaTooNew``
otherwise, naming both). DEVELOPERS.md, "Durable store", has the rules.
"""

from __future__ import annotations

import logging
import tempfile
import threading
import time
from pathlib import Path

import msgspec
import sqlalchemy as sa
from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection, Engine

from service import __version__
from service.platform.settings import SettingError
from service.state.durable.engine import describe, lock, make_engine, write_transaction

__all__ = [
    "MIGRATIONS",
    "VERSION_TABLE",
    "SchemaState",
    "SchemaTooNew",
    "current",
    "floor_of",
    "head",
    "revision",
    "schema_state",
    "upgrade",
]

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


# the floor of a schema no contract migration has touched: any release with the rollback rule runs on it
_NO_FLOOR = "0001"
_COMPAT = sa.table(
    "schema_compat",
    sa.column("id"),
    sa.column("revision"),
    sa.column("oldest_reader"),
    sa.column("release"),
    sa.column("created_at"),
)


class SchemaTooNew(SettingError):
    """The database was migrated by a newer release with a contract migration this release's code cannot run on."""


def _scripts() -> ScriptDirectory:
    return ScriptDirectory.from_config(_config())


def head() -> str:
    """The latest revision of the scripts."""
    rev = _scripts().get_current_head()
    assert rev is not None, f"no migrations in {MIGRATIONS}"
    return rev


def _order(rev: str) -> int:
    """Revisions are numbered (0001, 0002, ...; ``revision`` writes them so): their number orders them."""
    return int(rev)


def floor_of(rev: str) -> str:
    """The oldest revision whose code runs on the schema at ``rev``: the highest ``oldest_reader`` any script up to
    ``rev`` declares (expand-only scripts declare none)."""
    floor = _NO_FLOOR
    for script in _scripts().walk_revisions(base="base", head=rev):
        declared = getattr(script.module, "oldest_reader", None)
        if declared is not None and _order(declared) > _order(floor):
            floor = declared
    return floor


def current(con: Connection) -> str | None:
    """The revision the database is at (None: never migrated)."""
    return MigrationContext.configure(con, opts={"version_table": VERSION_TABLE}).get_current_revision()


def _known(rev: str) -> bool:
    try:
        return _scripts().get_revision(rev) is not None
    except Exception:  # Alembic raises for a revision that is not among the scripts
        return False


def _recorded_floor(con: Connection) -> str | None:
    """The floor the newest upgrade recorded (None when there is no record: a database from before 0004)."""
    if not sa.inspect(con).has_table("schema_compat"):
        return None
    row = con.execute(sa.select(_COMPAT.c.oldest_reader).order_by(_COMPAT.c.id.desc()).limit(1)).first()
    return None if row is None else str(row[0])


class SchemaState(msgspec.Struct):
    """Where a database stands for this release: at its head, behind it, or ahead (migrated by a newer release)."""

    at: str | None
    head: str
    ahead: bool
    floor: str | None

    @property
    def tolerated(self) -> bool:
        """Ahead of this release but expand-only since a revision this release's code knows."""
        return self.ahead and self.floor is not None and _order(self.head) >= _order(self.floor)


def schema_state(con: Connection) -> SchemaState:
    at = current(con)
    ahead = at is not None and not _known(at)
    return SchemaState(at=at, head=head(), ahead=ahead, floor=_recorded_floor(con) if ahead else None)


def _refuse_or_tolerate(state: SchemaState, where: str) -> None:
    if state.tolerated:
        logger.warning(
            "durable store %s is at revision %s, newer than this release's %s: running on it (expand-only since %s)",
            where,
            state.at,
            state.head,
            state.floor,
        )
        return
    why = (
        "it records no compatibility floor"
        if state.floor is None
        else f"it needs code at revision {state.floor} or later"
    )
    raise SchemaTooNew(
        f"the durable store {where} was migrated to revision {state.at} by a newer release and {why}; this release "
        f"knows revisions up to {state.head}: run a release at or above it, or restore the backup taken before the "
        "upgrade"
    )


def upgrade(engine: Engine, target: str | None = None) -> tuple[str | None, str]:
    """Migrate to the head revision (or ``target``, for tests of one step); returns the revisions before and after.
    Idempotent and safe to run at once. A database migrated beyond this release by a newer one is left as it is when
    this release may run on it (returns that revision twice) and refused with ``SchemaTooNew`` otherwise."""
    target = target or head()
    where = describe(engine.url)
    with _in_process, write_transaction(engine) as con:
        lock(con, _LOCK_KEY)
        state = schema_state(con)
        if state.ahead:
            assert state.at is not None
            _refuse_or_tolerate(state, where)
            return state.at, state.at
        before = state.at
        if before != target:
            logger.info("durable store %s: migrating from %s to %s", where, before, target)
            command.upgrade(_config(con), target)
            if sa.inspect(con).has_table("schema_compat"):  # from 0004 on (a test may stop before it)
                con.execute(
                    _COMPAT.insert().values(
                        revision=target, oldest_reader=floor_of(target), release=__version__, created_at=time.time()
                    )
                )
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
