"""What the service keeps on disk is its owner's only: the SQLite store (key digests, callback secrets) with its WAL
and SHM, and the Redis AOF (every tenant's assessments), however Redis is started here."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest
import redis

from service.platform.settings import DurableSettings
from service.state.durable import DurableStore
from service.state.durable.access import AccessStore
from tests.durable_support import migrated_store
from tests.support.local_redis import RedisServer

REPO = Path(__file__).resolve().parents[2]


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _others_bits(folder: Path) -> list[tuple[str, str]]:
    return [(str(p), oct(_mode(p))) for p in [folder, *folder.rglob("*")] if _mode(p) & 0o077]


@pytest.fixture()
def wide_umask() -> object:
    old = os.umask(0o022)  # what a shell usually has: files 644, which the finding found
    yield
    os.umask(old)


def test_the_sqlite_store_and_its_wal_and_shm_are_0600(tmp_path: Path, wide_umask: object) -> None:
    settings = DurableSettings(db_path=str(tmp_path / "trisk.db"), database_url="")
    with migrated_store(settings) as store:
        assert isinstance(store, DurableStore)
        AccessStore(store).rotate_callback_secret("team-a")  # a write: the WAL and SHM exist now
        files = sorted(tmp_path.glob("trisk.db*"))
        assert {p.name for p in files} >= {"trisk.db", "trisk.db-wal", "trisk.db-shm"}
        assert {p.name: oct(_mode(p)) for p in files} == {p.name: "0o600" for p in files}


def test_an_existing_wider_database_file_is_narrowed(tmp_path: Path, wide_umask: object) -> None:
    path = tmp_path / "old.db"
    path.touch(mode=0o644)
    path.chmod(0o644)
    with migrated_store(DurableSettings(db_path=str(path), database_url="")):
        assert _mode(path) == 0o600


def test_the_aof_of_a_local_redis_is_the_owners_only(tmp_path: Path, wide_umask: object) -> None:
    server = RedisServer(tmp_path / "redis")
    client = server.start()
    try:
        client.set("k", "v")
        client.bgrewriteaof()
        # the rewrite's files exist once Redis says it is done (not after a guessed pause)
        deadline = time.monotonic() + 30
        while (info := client.info("persistence"))["aof_rewrite_in_progress"] or info["aof_rewrite_scheduled"]:
            assert time.monotonic() < deadline, "the AOF rewrite did not finish"
            time.sleep(0.02)
        assert (tmp_path / "redis" / "appendonlydir").is_dir()
        assert _others_bits(tmp_path / "redis") == []
    finally:
        client.close()
        server.stop()


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="redis-server is not installed")
def test_scripts_redis_sh_keeps_its_aof_the_owners_only(tmp_path: Path, wide_umask: object) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{port}/0"}
    subprocess.run(["bash", str(REPO / "scripts" / "redis.sh")], cwd=tmp_path, env=env, check=True, timeout=60)
    client = redis.Redis(port=port)
    try:
        client.set("k", "v")
        assert _others_bits(tmp_path / "var" / "redis") == []
    finally:
        client.shutdown(nosave=True)
        client.close()
