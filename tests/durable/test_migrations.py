"""Migrations: the schema they make is the one declared, on both engines; they adopt a file of the hand-written SQLite
schema without losing a row; they run once however many processes start at once; a failed one changes nothing;
``trisk db upgrade`` migrates whichever database the settings name."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy.exc import DBAPIError

from service.platform.settings import DurableSettings
from service.state.durable import DurableStore, database_url, make_engine, upgrade
from service.state.durable.migrate import VERSION_TABLE, current, head
from service.state.durable.schema import metadata
from tests.durable_support import PostgresServer, sqlite_settings, uses_engine

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(60)

LEGACY_SCHEMA = (Path(__file__).parent / "legacy_schema.sql").read_text(encoding="utf-8")
TABLES = ("verdicts", "adjudications", "fits", "risk_models", "model_activations")
ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def engine_for(settings: DurableSettings) -> Iterator[sa.Engine]:
    engine = make_engine(database_url(settings))
    try:
        yield engine
    finally:
        engine.dispose()


def schema_differences(engine: sa.Engine) -> list[Any]:
    with engine.connect() as con:
        ctx = MigrationContext.configure(con, opts={"compare_type": True, "version_table": VERSION_TABLE})
        return list(compare_metadata(ctx, metadata))


def table_names(engine: sa.Engine) -> set[str]:
    return set(sa.inspect(engine).get_table_names())


def test_the_migrated_schema_is_the_declared_one(fresh_settings: DurableSettings) -> None:
    with engine_for(fresh_settings) as engine:
        assert upgrade(engine) == (None, head())
        assert schema_differences(engine) == []


def test_upgrade_is_idempotent(fresh_settings: DurableSettings) -> None:
    with engine_for(fresh_settings) as engine:
        upgrade(engine)
        DurableStore(engine).activate("t", "m", "m@1")
        assert upgrade(engine) == (head(), head())
        assert DurableStore(engine).active("t") is not None


# a process that gets ready (imports, a connection in its pool), then upgrades at a given wall-clock time
_UPGRADER = """
import sys, time
from service.state.durable import database_url, make_engine, upgrade
from service.platform.settings import DurableSettings
engine = make_engine(database_url(DurableSettings(db_path=sys.argv[1], database_url=sys.argv[2])))
engine.connect().close()
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
before, after = upgrade(engine)
print(before, after)
"""


def test_concurrent_upgrades_migrate_once(fresh_settings: DurableSettings) -> None:
    """Four processes upgrade one empty database at the same moment, as pods and workers starting together."""
    start_at = f"{time.time() + 6:.3f}"
    args = [sys.executable, "-c", _UPGRADER, fresh_settings.db_path, fresh_settings.database_url, start_at]
    procs = [
        subprocess.Popen(args, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(4)
    ]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 4, [err[-2000:] for _, err in outs]
    # one migrated, three found it done
    assert Counter(out.strip() for out, _ in outs) == {f"None {head()}": 1, f"{head()} {head()}": 3}
    with engine_for(fresh_settings) as engine:
        with engine.connect() as con:
            assert con.execute(sa.text(f"SELECT version_num FROM {VERSION_TABLE}")).scalars().all() == [head()]
        assert schema_differences(engine) == []


def test_a_failed_migration_leaves_nothing_behind(fresh_settings: DurableSettings) -> None:
    """A table named like one of trisk's but holding something else: the migration refuses it, and the tables it had
    created before finding it are gone again (DDL is transactional on both engines)."""
    with engine_for(fresh_settings) as engine:
        with engine.begin() as con:
            con.execute(sa.text("CREATE TABLE fits (x TEXT)"))
        with pytest.raises(RuntimeError, match="fits"):
            upgrade(engine)
        assert table_names(engine) == {"fits"}
        with engine.connect() as con:
            assert current(con) is None


# -- adopting a file of the hand-written schema


def _legacy_file(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """A file as the hand-written store left it (WAL, rows in every table, a gap in the ids); its rows per table."""
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("PRAGMA journal_mode=WAL")
    con.executescript(LEGACY_SCHEMA)
    snap = '{"signals":{"s":{"status":"value","value":3.0}},"risk":{"score":1.25}}'
    for i, (item, label) in enumerate([("i1", "MAJOR"), ("i2", "VALID"), ("i1", "MINOR")]):
        con.execute(
            "INSERT INTO verdicts (tenant, item_id, assessment_id, candidate_id, reviewer, label, error_category,"
            " note, lease_id, created_at, snapshot) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                "default",
                item,
                "a1",
                "c",
                f"r{i}",
                label,
                "agency" if label == "MAJOR" else None,
                None,
                None,
                1_700_000_000.5 + i,
                snap,
            ),
        )
    # a failed insert used to consume an id: the next row's id skips one, and adoption keeps ids as they are
    con.execute("UPDATE sqlite_sequence SET seq = seq + 1 WHERE name = 'verdicts'")
    con.execute(
        "INSERT INTO verdicts (tenant, item_id, assessment_id, candidate_id, reviewer, label, created_at, snapshot)"
        " VALUES ('other', 'i9', 'a9', 'c', 'bob', 'VALID', 1.0, '{}')"
    )
    adj = '{"id":"adj-1","tenant":"default","status":"done","label":"MAJOR"}'
    con.execute("INSERT INTO adjudications VALUES ('adj-1', 'default', 'i1', 'done', 'MAJOR', 1700000001.0, ?)", (adj,))
    con.execute("INSERT INTO fits VALUES ('fit-1', 'default', 'calibrated-default-v1', 1700000002.0, '{\"a\":1}')")
    for n in (1, 2):
        con.execute(
            "INSERT INTO risk_models (tenant, name, rule, created_at, body) VALUES (?, ?, ?, ?, ?)",
            ("default", f"calibrated-default-v{n}", f"calibrated-default-v{n}@1.0.0", 1700000003.0 + n, f'{{"n":{n}}}'),
        )
    con.execute(
        "INSERT INTO model_activations (tenant, model_name, rule, activated_at)"
        " VALUES ('default', 'calibrated-default-v2', 'calibrated-default-v2@1.0.0', 1700000009.0)"
    )
    rows = _rows(con)
    con.close()
    return rows


def _rows(con: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    return {t: con.execute(f"SELECT * FROM {t} ORDER BY 1").fetchall() for t in TABLES}


def test_a_file_of_the_hand_written_schema_is_adopted_without_losing_a_row(
    tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    uses_engine(request, "sqlite")
    settings = sqlite_settings(tmp_path)
    path = Path(settings.db_path)
    before = _legacy_file(path)
    assert [len(before[t]) for t in TABLES] == [4, 1, 1, 2, 1]
    with engine_for(settings) as engine:
        assert upgrade(engine) == (None, head())
        con = sqlite3.connect(path)
        after = _rows(con)
        # 0006 adds verdicts.request_key (the Idempotency-Key of verdicts since), 0008 the judgements of findings,
        # spans, the verdict replaced and the timing: six columns empty on every earlier verdict
        added = 6
        assert [row[-added:] for row in after["verdicts"]] == [(None,) * added] * len(before["verdicts"])
        after["verdicts"] = [row[:-added] for row in after["verdicts"]]
        # 0009 adds who activated a model, forced, the reason and the comparison: empty on earlier activations
        added = 4
        assert [row[-added:] for row in after["model_activations"]] == [(None,) * added]
        after["model_activations"] = [row[:-added] for row in after["model_activations"]]
        assert after == before  # every row, every column, ids and timestamps included
        con.close()
        assert schema_differences(engine) == []  # indistinguishable from a new file
        store = DurableStore(engine)
        assert [(v.item_id, v.label, v.opinion) for v in store.verdicts("default")] == [
            ("i1", "MAJOR", 1),
            ("i2", "VALID", 1),
            ("i1", "MINOR", 2),
        ]
        assert store.verdicts("default")[0].snapshot["risk"] == {"score": 1.25}
        assert [name for name, _ in store.models("default")] == ["calibrated-default-v1", "calibrated-default-v2"]
        active = store.active("default")
        assert active is not None and active.model_name == "calibrated-default-v2"
        # ids go on after the highest one ever handed out, never reusing one
        new = store.add_verdict(
            tenant="default",
            item_id="i1",
            assessment_id="a1",
            candidate_id="c",
            reviewer="r9",
            label="VALID",
            error_category=None,
            note=None,
            lease_id=None,
            snapshot={},
        )
        assert new.id == max(r[0] for r in before["verdicts"]) + 1 and new.opinion == 3
        # append-only now on every table, also where the hand-written schema had no trigger (fits; activations' DELETE)
        for table in TABLES:
            for statement in (f"UPDATE {table} SET tenant = 'x'", f"DELETE FROM {table}"):
                with pytest.raises(DBAPIError, match="append-only"), engine.begin() as c:
                    c.execute(sa.text(statement))
        with engine.connect() as c:
            assert c.exec_driver_sql("PRAGMA journal_mode").scalar_one() == "wal"


# -- the command


def _trisk(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("TRISK_DATABASE_URL", "TRISK_DB_PATH")}
    return subprocess.run(
        [str(Path(sys.executable).parent / "trisk"), *args],
        env={**clean, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_db_upgrade_without_a_url_migrates_the_sqlite_file(tmp_path: Path, request: pytest.FixtureRequest) -> None:
    uses_engine(request, "sqlite")
    path = tmp_path / "db" / "trisk.db"
    env = {"TRISK_DB_PATH": str(path)}
    first = _trisk("db", "upgrade", env=env)
    assert first.returncode == 0, first.stderr
    assert first.stdout == f"durable store (sqlite file {path}): upgraded from unversioned to revision {head()}\n"
    again = _trisk("db", "upgrade", env=env)
    assert again.returncode == 0 and "already at revision" in again.stdout, again.stdout + again.stderr
    assert _trisk("db", "current", env=env).returncode == 0


def test_db_upgrade_migrates_the_postgres_database_the_url_names(pg: PostgresServer, tmp_path: Path) -> None:
    with pg.fresh_database() as url:
        env = {"TRISK_DATABASE_URL": url.render_as_string(hide_password=False), "TRISK_DB_PATH": str(tmp_path / "no")}
        assert _trisk("db", "current", env=env).returncode == 1  # not migrated yet
        res = _trisk("db", "upgrade", env=env)
        assert res.returncode == 0, res.stderr
        assert "durable store (postgresql at 127.0.0.1:5432/trisk_test_" in res.stdout and "upgraded" in res.stdout
        assert _trisk("db", "current", env=env).returncode == 0
        assert not (tmp_path / "no").exists()  # the SQLite file was never touched


def test_a_url_of_another_database_is_refused_without_showing_its_password(tmp_path: Path) -> None:
    res = _trisk("db", "upgrade", env={"TRISK_DATABASE_URL": "mysql://trisk:s3cret@db/trisk"})
    assert res.returncode == 2
    assert "TRISK_DATABASE_URL: mysql:// is not supported" in res.stderr and "s3cret" not in res.stderr
