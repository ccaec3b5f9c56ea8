"""Rolling back: an older release runs on a database a newer one migrated (DEVELOPERS.md, "Durable store").

Three guards. Every migration script only expands the schema unless it declares ``oldest_reader`` (checked step by
step on both engines). This release runs on a schema one synthetic revision newer, made by a "newer release" (this
source tree plus one more script, run as a process), and refuses one whose newer revision contracts the schema. And
the previous release's code, checked out from git history (``rollback_base.txt``), serves on this release's newest
schema: its ``trisk db upgrade`` tolerates it and its API reads and writes keys there.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from alembic.script import ScriptDirectory

from service.platform.settings import DurableSettings
from service.state.durable import DurableStore, database_url, make_engine, upgrade
from service.state.durable.access import AccessStore, issue_key
from service.state.durable.migrate import MIGRATIONS, VERSION_TABLE, SchemaTooNew, _config, current, head
from tests.conftest import TEST_REDIS_URL
from tests.support.evaluation import free_port

# about how long this file takes on a quiet two-core machine (s): xdist workers start with the longest
pytestmark = pytest.mark.long(65)

ROOT = Path(__file__).resolve().parents[2]
BASE_FILE = Path(__file__).with_name("rollback_base.txt")
# the mark of the rollback rule in the code: releases before it stop on any revision they do not know
RULE_MARK = "class SchemaTooNew"
# a pattern, not a path: history has the file where each commit kept it (service/state/durable/ before the relayout)
RULE_FILE = "*/durable/migrate.py"


def _engine(settings: DurableSettings) -> sa.Engine:
    return make_engine(database_url(settings))


def _env(settings: DurableSettings, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRISK_")}
    env.update(TRISK_DB_PATH=settings.db_path, TRISK_DATABASE_URL=settings.database_url, TRISK_LOG_FORMAT="json")
    env.update(extra)
    return env


# -- expand only, unless a script says otherwise


def _shape(engine: sa.Engine) -> dict[str, dict[str, Any]]:
    """What older code relies on, per table: columns (type, nullable, has a default), the primary key, and the
    unique constraints and unique indexes (a new one can refuse an insert the old code makes)."""
    insp = sa.inspect(engine)
    out: dict[str, dict[str, Any]] = {}
    for table in insp.get_table_names():
        if table == VERSION_TABLE:
            continue
        columns = {
            c["name"]: (str(c["type"]).upper(), bool(c["nullable"]), c.get("default") is not None)
            for c in insp.get_columns(table)
        }
        uniques = {tuple(u["column_names"]) for u in insp.get_unique_constraints(table)}
        uniques |= {tuple(i["column_names"]) for i in insp.get_indexes(table) if i.get("unique")}
        pk = tuple(insp.get_pk_constraint(table)["constrained_columns"])
        out[table] = {"columns": columns, "uniques": uniques, "pk": pk}
    return out


def expand_violations(before: dict[str, dict[str, Any]], after: dict[str, dict[str, Any]]) -> list[str]:
    """What a migration did that code written for ``before`` may not survive."""
    problems = []
    for table, old in before.items():
        new = after.get(table)
        if new is None:
            problems.append(f"table {table} dropped")
            continue
        if new["pk"] != old["pk"]:
            problems.append(f"{table}: primary key {old['pk']} became {new['pk']}")
        for name, (kind, nullable, _) in old["columns"].items():
            if name not in new["columns"]:
                problems.append(f"{table}.{name} dropped or renamed")
                continue
            new_kind, new_nullable, _ = new["columns"][name]
            if new_kind != kind:
                problems.append(f"{table}.{name}: type {kind} became {new_kind}")
            if nullable and not new_nullable:
                problems.append(f"{table}.{name}: became NOT NULL")
        for name, (_, nullable, has_default) in new["columns"].items():
            if name not in old["columns"] and not nullable and not has_default:
                problems.append(f"{table}.{name}: new NOT NULL column without a server default (old inserts fail)")
        for unique in new["uniques"] - old["uniques"]:
            problems.append(f"{table}: new unique constraint on {unique}")
    return problems


def test_the_expand_check_sees_what_breaks_older_code() -> None:
    before = {
        "t": {"columns": {"a": ("TEXT", False, False), "b": ("TEXT", True, False)}, "uniques": set(), "pk": ("a",)}
    }
    fine = {
        "t": {
            "columns": {**before["t"]["columns"], "c": ("TEXT", True, False), "d": ("TEXT", False, True)},
            "uniques": set(),
            "pk": ("a",),
        },
        "new_table": {"columns": {}, "uniques": set(), "pk": ()},
    }
    assert expand_violations(before, fine) == []
    broken = {
        "t": {
            "columns": {"a": ("INTEGER", False, False), "b": ("TEXT", False, False), "e": ("TEXT", False, False)},
            "uniques": {("b",)},
            "pk": ("a",),
        }
    }
    assert expand_violations(before, broken) == [
        "t.a: type TEXT became INTEGER",
        "t.b: became NOT NULL",
        "t.e: new NOT NULL column without a server default (old inserts fail)",
        "t: new unique constraint on ('b',)",
    ]
    assert expand_violations(before, {}) == ["table t dropped"]


def _steps() -> list[tuple[str, str, Any]]:
    scripts = ScriptDirectory.from_config(_config())
    return [
        (s.down_revision, s.revision, s.module) for s in reversed(list(scripts.walk_revisions())) if s.down_revision
    ]


def test_every_migration_expands_unless_it_declares_a_floor(fresh_settings: DurableSettings) -> None:
    """Step by step from the first revision (which adopts the hand-written schema) to the head."""
    engine = _engine(fresh_settings)
    try:
        steps = _steps()
        assert steps and steps[-1][1] == head()
        upgrade(engine, steps[0][0])
        for prev, rev, module in steps:
            before = _shape(engine)
            assert upgrade(engine, rev) == (prev, rev)
            problems = expand_violations(before, _shape(engine))
            declared = getattr(module, "oldest_reader", None)
            if declared is None:
                assert problems == [], (
                    f"migration {rev} contracts the schema: older releases would break on it ({problems}); "
                    "split it into an expand now and a contract later (declaring oldest_reader), DEVELOPERS.md"
                )
            else:
                assert int(declared) <= int(rev) and problems, f"{rev} declares oldest_reader but only expands"
    finally:
        engine.dispose()


def test_revisions_are_numbered_in_one_line() -> None:
    """The floor compares revisions by number: they must be 0001, 0002, ... each after the one before."""
    steps = _steps()
    numbers = [int(steps[0][0]), *(int(rev) for _, rev, _ in steps)]
    assert numbers == list(range(1, len(numbers) + 1)), numbers
    assert all(len(rev) == 4 for _, rev, _ in steps)


# -- a synthetic newer release


def _newer_release(tmp: Path, *, contract: bool) -> Path:
    """This source tree with one more migration script: an expanding one, or one that declares a floor above this
    release (as a contract migration does)."""
    tree = tmp / ("contract" if contract else "expand")
    shutil.copytree(ROOT / "service", tree / "service", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "models", tree / "models")
    rev = f"{int(head()) + 1:04d}"
    floor = f'oldest_reader = "{rev}"\n' if contract else ""
    script = f'''"""A synthetic newer release's migration (tests/durable/test_rollback.py)."""
from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "{rev}"
down_revision = "{head()}"
branch_labels = None
depends_on = None
{floor}

def upgrade() -> None:
    op.create_table("synthetic_newer", sa.Column("id", sa.Integer(), primary_key=True), sa.Column("x", sa.Text()))
    op.add_column("verdicts", sa.Column("newer_note", sa.Text(), nullable=True))
'''
    versions = tree / MIGRATIONS.relative_to(ROOT) / "versions"
    (versions / f"{rev}_synthetic.py").write_text(script, encoding="utf-8")
    return tree


def _trisk(tree: Path | None, settings: DurableSettings, *args: str) -> subprocess.CompletedProcess[str]:
    """``trisk ...`` as a process of the release in ``tree`` (None: this checkout)."""
    cwd = tree or ROOT
    env = _env(settings, PYTHONPATH=str(cwd))
    code = "import sys, service; from service.cli import main; print('release at', service.__file__); sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _released_tree(res: subprocess.CompletedProcess[str], tree: Path) -> None:
    assert res.stdout.startswith(f"release at {tree}"), f"the release's own code did not run: {res.stdout[:300]}"


def test_this_release_serves_on_a_schema_a_newer_release_expanded(
    fresh_settings: DurableSettings, tmp_path: Path
) -> None:
    from litestar.testing import TestClient

    from service.app import create_app
    from service.platform.settings import get_settings
    from tests.conftest import keyed

    newer = _newer_release(tmp_path, contract=False)
    res = _trisk(newer, fresh_settings, "db", "upgrade")
    _released_tree(res, newer)
    assert res.returncode == 0 and f"to revision {int(head()) + 1:04d}" in res.stdout, res.stdout + res.stderr
    engine = _engine(fresh_settings)
    try:
        with engine.connect() as con:
            assert current(con) == f"{int(head()) + 1:04d}"
        # this release: upgrade leaves it as it is, and the store reads and writes (verdicts has a column more)
        assert upgrade(engine) == (f"{int(head()) + 1:04d}",) * 2
        store = DurableStore(engine)
        token, _ = issue_key(store, "rollback", "admin", ["admin"])
        assert [k.name for k in AccessStore(store).keys("rollback")] == ["admin"]
    finally:
        engine.dispose()
    current_cli = _trisk(None, fresh_settings, "db", "current")
    assert current_cli.returncode == 0 and "tolerated" in current_cli.stdout, current_cli.stdout + current_cli.stderr
    upgrade_cli = _trisk(None, fresh_settings, "db", "upgrade")
    assert upgrade_cli.returncode == 0 and "tolerated" in upgrade_cli.stdout, upgrade_cli.stdout + upgrade_cli.stderr
    # and the API of this release starts on it and serves a key's routes
    base = get_settings()
    settings = base.__class__(**{**base.__dict__, "durable": fresh_settings})
    with TestClient(app=create_app(settings)) as tc:
        keyed(tc, token)
        assert tc.get("/v1/keys").status_code == 200
        made = tc.post("/v1/keys", json={"name": "after rollback", "scopes": ["read"]})
        assert made.status_code == 201, made.text


def test_this_release_refuses_a_schema_a_newer_release_contracted(
    fresh_settings: DurableSettings, tmp_path: Path
) -> None:
    newer = _newer_release(tmp_path, contract=True)
    res = _trisk(newer, fresh_settings, "db", "upgrade")
    assert res.returncode == 0, res.stdout + res.stderr
    rev = f"{int(head()) + 1:04d}"
    engine = _engine(fresh_settings)
    try:
        with pytest.raises(SchemaTooNew, match=f"revision {rev} .* needs code at revision {rev}.*up to {head()}"):
            upgrade(engine)
        with engine.connect() as con:
            assert current(con) == rev  # untouched
    finally:
        engine.dispose()
    refused = _trisk(None, fresh_settings, "db", "upgrade")
    assert refused.returncode == 2 and "by a newer release" in refused.stderr, refused.stdout + refused.stderr
    assert _trisk(None, fresh_settings, "db", "current").returncode == 1


# -- the previous release, from git history


def rollback_base() -> str:
    """The commit of the previous release: the pin in rollback_base.txt, or (``auto``) the first commit whose code
    carries the rollback rule."""
    pin = next(ln.strip() for ln in BASE_FILE.read_text(encoding="utf-8").splitlines() if ln.strip() and ln[0] != "#")
    git = ["git", "-C", str(ROOT)]
    if pin != "auto":
        res = subprocess.run([*git, "rev-parse", "--verify", f"{pin}^{{commit}}"], capture_output=True, text=True)
        assert res.returncode == 0, f"rollback_base.txt names {pin}, which is not in this history: {res.stderr}"
        return res.stdout.strip()
    res = subprocess.run(
        [*git, "log", "--reverse", "--format=%H", "-S", RULE_MARK, "--", RULE_FILE],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, f"git history is needed (CI clones it whole): {res.stderr}"
    commits = res.stdout.split()
    assert commits, f"no commit in this history adds {RULE_MARK!r} to {RULE_FILE}: commit it (or pin a release)"
    return commits[0]


def _checkout(commit: str, into: Path) -> Path:
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", "--format=tar", commit, "service", "workers", "models"],
        capture_output=True,
        check=True,
    )
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(into, filter="data")
    return into


def test_the_previous_release_serves_on_the_newest_schema(fresh_settings: DurableSettings, tmp_path: Path) -> None:
    base = rollback_base()
    old = _checkout(base, tmp_path / f"release-{base[:10]}")
    engine = _engine(fresh_settings)
    try:
        upgrade(engine)  # the newest schema: this checkout's head
        token, _ = issue_key(DurableStore(engine), "rollback", "admin", ["admin"])
    finally:
        engine.dispose()
    res = _trisk(old, fresh_settings, "db", "upgrade")
    _released_tree(res, old)
    assert res.returncode == 0, (
        f"the previous release ({base[:10]}) does not run on this release's schema: {res.stdout}{res.stderr}\n"
        "a contract migration needs the pin in tests/durable/rollback_base.txt moved to a release that runs on it"
    )
    # its API, as a process on this schema: reads the key made by this release, writes another
    port = free_port()
    env = _env(
        fresh_settings,
        PYTHONPATH=str(old),
        REDIS_URL=TEST_REDIS_URL,
        TRISK_INDEX_PATH=str(tmp_path / "no-index.trisk"),
        TRISK_QUEUE_NAME=f"trisk:test:rollback:{port}",
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "service.cli", "serve", "--port", str(port)],
        cwd=old,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        headers = {"Authorization": f"Bearer {token}"}
        deadline = time.monotonic() + 90
        while True:
            assert proc.poll() is None, (
                f"the previous release's API exited: {proc.stdout.read() if proc.stdout else ''}"
            )
            try:
                keys = httpx.get(f"http://127.0.0.1:{port}/v1/keys", headers=headers, timeout=5)
                break
            except httpx.TransportError:
                assert time.monotonic() < deadline, "the previous release's API did not come up"
                time.sleep(0.3)
        assert keys.status_code == 200 and [k["name"] for k in keys.json()] == ["admin"], keys.text
        made = httpx.post(
            f"http://127.0.0.1:{port}/v1/keys", headers=headers, json={"name": "old", "scopes": ["read"]}, timeout=10
        )
        assert made.status_code == 201, made.text
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
    engine = _engine(fresh_settings)
    try:
        assert sorted(k.name for k in AccessStore(DurableStore(engine)).keys("rollback")) == ["admin", "old"]
    finally:
        engine.dispose()
